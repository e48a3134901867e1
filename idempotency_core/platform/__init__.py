"""What the project and the apps stand on: settings read from the environment
(`env`), the logging filters (`logfilters`) and the quick start's embedded
PostgreSQL server (`embedded_postgres`).

It imports nothing else of Onefold's, so `config/` (the settings, the urls) and
the apps may all use it while the apps import nothing from `config/`."""
