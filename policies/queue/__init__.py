"""Queue-order policies, selected by name through ``QUEUE_ORDERS``."""

from policies.queue.base import QUEUE_ORDERS, QueueOrder
from policies.queue.fifo import ClassFifoQueue, FifoQueue

__all__ = ["QUEUE_ORDERS", "ClassFifoQueue", "FifoQueue", "QueueOrder"]
