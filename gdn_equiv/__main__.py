import sys

from gdn_equiv.run.cli import main

sys.exit(main())
