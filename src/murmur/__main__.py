import sys

from murmur.cli import main

sys.exit(main())
