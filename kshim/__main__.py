import sys

from kshim.cli import main

sys.exit(main())
