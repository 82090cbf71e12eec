"""`python -m ostinato` is the `ostinato` command."""

from ostinato.services.cli.main import main

main()
