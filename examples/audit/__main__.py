"""`python -m examples.audit`: run the audit app (see app.py and README.md)."""

from examples.audit.app import main

main()
