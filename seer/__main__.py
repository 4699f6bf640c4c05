import sys

from seer.cli import main

sys.exit(main())
