"""What runs: history processor, frontend API, cluster admin, the `ostinato` CLI and `ostinato dev`."""
