"""What every stage shares: the config and its rules, stage declarations, the record schema, the grid of cells, clocks, workers, the CLI and its errors."""
