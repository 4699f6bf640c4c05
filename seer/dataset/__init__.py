"""From raw records to the tidy tables (Parquet parts), splits, SEER's Excel sheets, provenance; views of the tables."""
