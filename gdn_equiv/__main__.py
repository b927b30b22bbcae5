import sys

from gdn_equiv.cli import main

sys.exit(main())
