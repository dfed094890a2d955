"""The DuckDB store, named queries and limit analysis."""
