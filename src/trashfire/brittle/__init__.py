"""002's LIME brittle-score of every model cell: the work of DVC stage `brittle` (`scores`)."""
