"""The ``dbt`` connector type: a dbt project's artifacts (manifest, catalog) served as cited knowledge and lineage."""
