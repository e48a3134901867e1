"""The benchmarks behind `make bench`, each with a baseline measured in the same run."""
