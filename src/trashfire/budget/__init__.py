"""Is each attack's budget large enough? The work of DVC stage `budget` (`check`): the
calibration reruns at a larger budget (`reruns`), the per-family model of which standing
samples a larger budget breaks (`model`), and the `budget` section's checks (`checks`)."""
