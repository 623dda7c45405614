import signal
import sys

from .cli import main

# As PID 1 in a container, Python ignores SIGTERM unless told otherwise; `docker stop` must stop it at once.
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
sys.exit(main())
