import sys

from warptd.cli import main

sys.exit(main())
