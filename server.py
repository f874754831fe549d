"""Start the Kernel Explorer web server: python server.py [--host H] [--port P] (same options as `kernel-explorer serve`)."""
import sys
from explorer.cli import main

if __name__ == "__main__":
  main(["serve", *sys.argv[1:]])
