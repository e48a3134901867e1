"""Sources: the websites that send submissions, their secrets and their field maps."""
