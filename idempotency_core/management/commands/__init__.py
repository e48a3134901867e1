"""Commands: create_source, sweep, demo_setup, drill, reconcile."""
