"""Physics simulators: they make the world model's data and score the policy honestly, never
train it. Parts, one file each:

* ``tasks.py``: the tabletop's tasks, cameras and state layout, without MuJoCo (what the
  config checks and the trainers read: they never load a simulator);
* ``tabletop.py``: the CPU MuJoCo tabletop suite (scene, success, ``TabletopVecEnv``; MuJoCo
  is imported where a scene is built);
* ``camera.py``: a tabletop camera's pinhole projection, world points to pixels (the privileged
  state's blocks in the image; MuJoCo only to read the camera);
* ``expert.py``: the scripted expert that collects its demonstrations;
* ``libero_adapter.py`` / ``libero_vec.py``: LIBERO behind the same interface (``make libero``);
* ``episodes.py``: any action source (expert, policy) rolled out in a simulator -> ``Episode``s;
* ``dataset.py``: ``Episode`` and the on-disk trajectory dataset.
* ``collect.py``: rollouts collected into a dataset (``scripts/collect.py``).
"""
