//! rxe (soft-RoCE): the kernel-shared queues, WQE building and completion parsing.
