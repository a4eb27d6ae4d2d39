import torch.nn as nn
