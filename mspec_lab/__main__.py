"""``python -m mspec_lab <command>``: the workshop's command line (:mod:`mspec_lab.cli`)."""

import sys

from mspec_lab.cli import main

if __name__ == "__main__":
    sys.exit(main())
