"""What runs, in rooms by concern: `history/` (the processor), `frontend/` (HTTP), `admin/` (cluster records and
checks), `cli/` (the command line); `server.py` composes the first three into `ostinato server`."""
