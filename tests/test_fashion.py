"""The data set's facts on the ground floor: its classes, its image side, and its
in-memory type, the same objects `data/` hands on."""

import numpy as np


def test_the_facts_agree_with_each_other_and_with_the_paper():
    from eqx_fmnist.fashion import CLASS_NAMES, IMAGE_SHAPE, IMAGE_SIZE, NUM_CLASSES, SIDE

    assert NUM_CLASSES == len(CLASS_NAMES) == 10
    assert CLASS_NAMES[0] == "T-shirt/top" and CLASS_NAMES[-1] == "Ankle boot"
    assert IMAGE_SHAPE == (SIDE, SIDE) == (28, 28) and IMAGE_SIZE == 784


def test_data_hands_on_the_same_objects():
    import eqx_fmnist as ef
    from eqx_fmnist import data, fashion

    assert data.FashionMNIST is fashion.FashionMNIST is ef.FashionMNIST
    assert data.CLASS_NAMES is fashion.CLASS_NAMES and data.IMAGE_SIZE == fashion.IMAGE_SIZE


def test_a_data_set_in_memory_holds_its_arrays_and_says_where_they_came_from(tmp_path):
    from eqx_fmnist.fashion import CLASS_NAMES, FashionMNIST

    images = np.zeros((3, 28, 28), np.uint8)
    labels = np.arange(3, dtype=np.uint8)
    fm = FashionMNIST(images, labels, images[:1], labels[:1], tmp_path, origin="user cache")
    assert fm.class_names == CLASS_NAMES and fm.source == tmp_path
    assert fm.train_images.shape == (3, 28, 28) and fm.origin == "user cache"
