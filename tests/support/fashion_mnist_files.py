"""A small generated look-alike of Fashion-MNIST for the tests that train examples/fashion_mnist (test_main_job.py,
tests/slurm/test_fashion_mnist.py): the data set's gzipped IDX files, with labels readable from the pixels (a
sample of label L has its row 2L lit), so a few epochs of training learn them in seconds."""
import gzip
import os
import struct


def write_split(directory, prefix, n):
    """Writes PREFIX-images-idx3-ubyte.gz and PREFIX-labels-idx1-ubyte.gz of `n` 28x28 samples into `directory`."""
    labels = bytes((i * 7) % 10 for i in range(n))
    images = bytearray(n * 784)
    for i in range(n):
        row = labels[i] * 2
        for p in range(784):
            images[i * 784 + p] = 255 if p // 28 == row else (p * 13 + i) % 50
    with gzip.open(os.path.join(directory, f"{prefix}-images-idx3-ubyte.gz"), "wb", compresslevel=1) as f:
        f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, n, 28, 28) + bytes(images))
    with gzip.open(os.path.join(directory, f"{prefix}-labels-idx1-ubyte.gz"), "wb", compresslevel=1) as f:
        f.write(struct.pack(">BBBBI", 0, 0, 8, 1, n) + labels)
