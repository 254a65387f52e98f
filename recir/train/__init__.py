"""Training recursive models: optimizers, the minibatch loop, SST metrics."""

from recir.train.loop import TrainConfig, load_checkpoint, save_checkpoint, train
from recir.train.metrics import evaluate
from recir.train.optimizers import OPTIMIZERS, SGD, Adagrad, Adam

__all__ = ["OPTIMIZERS", "SGD", "Adagrad", "Adam", "TrainConfig", "evaluate",
           "load_checkpoint", "save_checkpoint", "train"]
