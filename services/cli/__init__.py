"""The `ostinato` command line (`cli.main`), its verbs, `ostinato dev` and `ostinato demo`."""
