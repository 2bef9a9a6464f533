import sys

from kshim.cli import main

if __name__ == "__main__":  # not when a spawned child (the log cleaner's process) imports it as __mp_main__
    sys.exit(main())
