"""What wmrl reads and writes, written so that a crash cannot leave it half-done. Nothing is
imported here; the parts:

``atomic.py``   files and folders written whole or not at all (write beside, then rename), and
                the output-folder rule: no command deletes what it did not write.
``videos.py``   frames side by side and animated GIFs (the sim eval's, imagined vs real).
``pixels.py``   uint8 frames [0, 255] <-> the models' float range [-1, 1], one definition for
                the env, the world model, the rewards and their training.
"""
