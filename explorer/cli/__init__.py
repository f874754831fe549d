"""`kernel-explorer`: the command line."""
from explorer.cli.main import main as main
