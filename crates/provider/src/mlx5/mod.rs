//! mlx5 (ConnectX): CQ ring, CQE64 parsing, owner bit, arming.
