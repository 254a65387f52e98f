"""Training recursive models: optimizers, the minibatch loop, SST metrics,
checkpoints and model files."""

from recir.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from recir.train.loop import TrainConfig, TrainConfigError, train
from recir.train.metrics import NodeScorer, evaluate
from recir.train.model_file import LoadedModel, load, save_model
from recir.train.optimizers import OPTIMIZERS, SGD, Adagrad, Adam

__all__ = ["OPTIMIZERS", "SGD", "Adagrad", "Adam", "CheckpointError", "LoadedModel",
           "NodeScorer", "TrainConfig", "TrainConfigError", "evaluate", "load",
           "load_checkpoint", "save_checkpoint", "save_model", "train"]
