"""Queue-order policies, selected by name through ``QUEUE_ORDERS``."""

from policies.queue.base import QUEUE_ORDERS, QueueOrder
from policies.queue.fifo import ClassFifoQueue, FifoQueue
from policies.queue.las import LeastAttainedQueue, las_level
from policies.queue.priority import PriorityAgeingQueue
from policies.queue.slack import SlackQueue, slack

__all__ = [
    "QUEUE_ORDERS",
    "ClassFifoQueue",
    "FifoQueue",
    "LeastAttainedQueue",
    "PriorityAgeingQueue",
    "QueueOrder",
    "SlackQueue",
    "las_level",
    "slack",
]
