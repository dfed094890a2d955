"""Archive: sealed periods as hive-partitioned Parquet (docs/store.md, *Archive*)."""
