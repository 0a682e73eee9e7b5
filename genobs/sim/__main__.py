"""`python -m genobs.sim`: the `genobs simulate` command."""

from .cli import simulate

if __name__ == "__main__":
    simulate(prog_name="python -m genobs.sim")
