//! Rates, fork support and the `*_str` functions: calls that touch no object.

use super::*;

/// `enum ibv_rate` values with their multiple of 2.5 Gb/s (`ibv_rate_to_mult`; -1 where
/// libibverbs has none) and their rate in Mb/s (`ibv_rate_to_mbps`), from the IBTA's rate
/// encoding: 2 = 2.5, 5 = 5, 3 = 10, 6 = 20, 4 = 30, 7 = 40, 8 = 60, 9 = 80, 10 = 120 Gb/s
/// (SDR..QDR widths), then FDR/EDR/HDR/NDR lanes (14.0625, 56.25, …, 1275 Gb/s).
const RATES: &[(c_int, c_int, c_int)] = &[
    (2, 1, 2500),
    (3, 4, 10000),
    (4, 12, 30000),
    (5, 2, 5000),
    (6, 8, 20000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

symver!(ibv_rate_to_mult => "IBVERBS_1.0");
/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s; -1 for `IBV_RATE_MAX`, unknown
/// values and the rates libibverbs gives no multiple for.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

symver!(mult_to_ibv_rate => "IBVERBS_1.0");
/// `mult_to_ibv_rate`: the inverse of [`ibv_rate_to_mult`]; `IBV_RATE_MAX` (0) for a
/// multiple no rate has.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(0, |r| r.0)
}

symver!(ibv_rate_to_mbps => "IBVERBS_1.1");
/// `ibv_rate_to_mbps`: the rate in Mb/s; -1 for `IBV_RATE_MAX` and unknown values.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

symver!(mbps_to_ibv_rate => "IBVERBS_1.1");
/// `mbps_to_ibv_rate`: the rate whose Mb/s is exactly `mbps`; `IBV_RATE_MAX` (0) otherwise.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

symver!(ibv_fork_init => "IBVERBS_1.1");
/// `ibv_fork_init`: 0 (the kernels rverbs runs on keep registered memory intact across
/// fork, so nothing has to be done).
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

symver!(ibv_is_fork_initialized => "IBVERBS_1.13");
/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (2).
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

/// Strings of rdma-core's `ibv_wc_status_str`, by status number.
const WC_STATUS: &[&CStr] = &[
    c"success",
    c"local length error",
    c"local QP operation error",
    c"local EE context operation error",
    c"local protection error",
    c"Work Request Flushed Error",
    c"memory management operation error",
    c"bad response error",
    c"local access error",
    c"remote invalid request error",
    c"remote access error",
    c"remote operation error",
    c"transport retry counter exceeded",
    c"RNR retry counter exceeded",
    c"local RDD violation error",
    c"remote invalid RD request",
    c"aborted error",
    c"invalid EE context number",
    c"invalid EE context state",
    c"fatal error",
    c"response timeout error",
    c"general error",
    c"TM error",
    c"TM software rendezvous",
];

fn pick(table: &[&'static CStr], i: c_int) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

symver!(ibv_wc_status_str => "IBVERBS_1.1");
/// `ibv_wc_status_str`.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    pick(WC_STATUS, status)
}

symver!(ibv_node_type_str => "IBVERBS_1.1");
/// `ibv_node_type_str`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    pick(T, node_type)
}

symver!(ibv_port_state_str => "IBVERBS_1.1");
/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    pick(T, state)
}

symver!(ibv_event_type_str => "IBVERBS_1.1");
/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    pick(T, event)
}
