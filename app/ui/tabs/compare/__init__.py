"""The Compare tab: selection methods compared by training, run here or loaded from a file."""
