import sys

from .lifecycle import main

sys.exit(main())
