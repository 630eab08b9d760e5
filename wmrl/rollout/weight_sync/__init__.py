"""Weight sync from the trainer to rollout workers: bucketed, versioned, optionally delta.

The sender groups the state dict by dtype into buckets of about ``bucket_mb`` and describes
them with a small picklable ``WeightLayout`` (name, shape, dtype, bucket, element offset of
every tensor). Tensors travel as raw bits, so any dtype works and a sync reconstructs the
weights bit for bit. Nothing is imported here; the parts:

``types.py``       ``WeightLayout``, ``TensorSlot``, ``SyncPayload``, ``DeltaBucket``,
                   ``WeightSyncError``, ``TRANSPORTS``: what both sides share.
``codec.py``       a bucket as raw bits: full, or delta (changed positions and their bits).
``sender.py``      ``WeightSender`` (trainer: layout, delta base, payloads) and
                   ``push_weights`` (one sync to Ray actors).
``receiver.py``    ``WeightReceiver`` (worker: checks, applies, versions, zero-copy).
``store.py``       transport ``cpu``: one Ray object-store object per bucket.
``collective.py``  transports ``gloo`` and ``device``: broadcasts over a process group.
``ipc.py``         transport ``ipc``: CUDA IPC handles for workers on the trainer's card
                   (``device`` with collocated actors).

Each transport module holds its sender half and its receiver half (mixins of
``WeightSender`` and ``WeightReceiver``); the user configures ``cpu``, ``gloo`` or ``device``,
``ActorSync`` switches to ``ipc`` (or back to ``cpu``) where the placement asks for it.

Versions: every sync carries ``version``; a worker checks the whole payload against the
layout before touching a parameter, applies all buckets, then sets its version in one
assignment, under a lock that ``WeightReceiver.reading`` also holds while sampling, so a
sample never mixes two versions. A delta applies only on top of its ``base_version``.
"""
