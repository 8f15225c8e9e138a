"""``python -m monobuild``: the ``monobuild`` command."""

from monobuild.cli.main import main

main(prog_name="monobuild")
