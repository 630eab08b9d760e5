"""LeRobot datasets on disk, read and written without the ``lerobot`` package. Nothing is
imported here; the parts:

``dataset.py``  ``LeRobotDataset``: a LeRobot dataset (codebase v2.1 or v3.0) read
                locally one episode at a time (``LeRobotEpisode``: frames decoded from the
                mp4 with PyAV, actions, state, success, task).
``writer.py``   ``write_lerobot``: episodes (ours or another dataset's) written in the
                published LeRobot layout, v2.1 or v3.0, atomically.

The layout both follow, with the upstream files it was read in:
``docs/reference/lerobot_format.md``.
"""
