"""Data sets: loading them from local files (sklearn digits, MNIST and Fashion-MNIST IDX, CIFAR pickles), fused variants, and the prepared split the stages read."""
