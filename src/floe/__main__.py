import sys

from floe.cli.main import main

sys.exit(main())
