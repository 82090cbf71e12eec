"""`python -m ostinato` is the `ostinato` command."""

from ostinato.services.cli import main

main()
