"""`python -m app.cli ...` (what `accelerate launch -m app.cli` runs): the `gmts` command."""

from app.cli import main

if __name__ == "__main__":
    main()
