//! Which sockets become rsockets: rdma-core's `preload_config` rules and the `RS_*`
//! environment.

use std::sync::OnceLock;

use libc::c_int;

use crate::rsocket as r;

/// rdma-core's preload environment: `RS_SQ_SIZE`, `RS_RQ_SIZE`, `RS_INLINE`, each for its
/// rsockets option (unset or unparsable: the default).
pub(crate) fn env_options() -> &'static [(c_int, Option<c_int>); 3] {
    static OPTS: OnceLock<[(c_int, Option<c_int>); 3]> = OnceLock::new();
    OPTS.get_or_init(|| {
        let v = |n: &str| std::env::var(n).ok().and_then(|s| s.trim().parse().ok());
        [
            (r::RDMA_SQSIZE, v("RS_SQ_SIZE")),
            (r::RDMA_RQSIZE, v("RS_RQ_SIZE")),
            (r::RDMA_INLINE, v("RS_INLINE")),
        ]
    })
}

/// One line of rdma-core's `preload_config`: `program domain type protocol`, `*` (here
/// `None` / 0) matching anything.
#[derive(Debug, PartialEq)]
pub(crate) struct Rule {
    /// A case-insensitive prefix of the program's short name.
    pub name: Option<String>,
    pub domain: c_int,
    pub type_: c_int,
    pub protocol: c_int,
}

/// The rules of a `preload_config` text, as rdma-core's `scan_config` reads them: a line
/// starting with `#` is a comment; a line needs four words, and a word that is neither `*`
/// nor a known name (`INET`/`AF_INET`/`PF_INET`, `INET6`…, `IB`…; `STREAM`/`SOCK_STREAM`,
/// `DGRAM`…; `TCP`/`IPPROTO_TCP`, `UDP`…, in any case) drops its line.
pub(crate) fn parse_preload_config(text: &str) -> Vec<Rule> {
    let word = |w: &str, names: &[(&[&str], c_int)]| -> Option<c_int> {
        if w == "*" {
            return Some(0);
        }
        names
            .iter()
            .find(|(ns, _)| ns.iter().any(|n| n.eq_ignore_ascii_case(w)))
            .map(|(_, v)| *v)
    };
    let mut rules = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 4 {
            continue;
        }
        let Some(domain) = word(
            w[1],
            &[
                (&["INET", "AF_INET", "PF_INET"], libc::AF_INET),
                (&["INET6", "AF_INET6", "PF_INET6"], libc::AF_INET6),
                (&["IB", "AF_IB", "PF_IB"], 27),
            ],
        ) else {
            continue;
        };
        let Some(type_) = word(
            w[2],
            &[
                (&["STREAM", "SOCK_STREAM"], libc::SOCK_STREAM),
                (&["DGRAM", "SOCK_DGRAM"], libc::SOCK_DGRAM),
            ],
        ) else {
            continue;
        };
        let Some(protocol) = word(
            w[3],
            &[
                (&["TCP", "IPPROTO_TCP"], libc::IPPROTO_TCP),
                (&["UDP", "IPPROTO_UDP"], libc::IPPROTO_UDP),
            ],
        ) else {
            continue;
        };
        rules.push(Rule {
            name: (w[0] != "*").then(|| w[0].to_string()),
            domain,
            type_,
            protocol,
        });
    }
    rules
}

/// Whether `rules` let `program` have an rsocket for `(domain, type, protocol)`: no rules,
/// or one that matches (rdma-core's `intercept_socket`; `type`'s `SOCK_NONBLOCK` and
/// `SOCK_CLOEXEC` are not compared, where rdma-core compares them too).
pub(crate) fn intercepted(
    rules: &[Rule],
    program: &str,
    domain: c_int,
    type_: c_int,
    protocol: c_int,
) -> bool {
    if rules.is_empty() {
        return true;
    }
    let type_ = type_ & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let protocol = match (protocol, type_) {
        (0, libc::SOCK_STREAM) => libc::IPPROTO_TCP,
        (0, libc::SOCK_DGRAM) => libc::IPPROTO_UDP,
        (p, _) => p,
    };
    rules.iter().any(|r| {
        r.name.as_ref().map_or(true, |n| {
            program.len() >= n.len()
                && program.as_bytes()[..n.len()].eq_ignore_ascii_case(n.as_bytes())
        }) && (r.domain == 0 || r.domain == domain)
            && (r.type_ == 0 || r.type_ == type_)
            && (r.protocol == 0 || r.protocol == protocol)
    })
}

/// Whether this program may have an rsocket for `(domain, type, protocol)` by
/// `preload_config` in rsockets' configuration directory (read once; absent: yes).
pub(crate) fn config_allows(domain: c_int, type_: c_int, protocol: c_int) -> bool {
    static RULES: OnceLock<(Vec<Rule>, String)> = OnceLock::new();
    let (rules, program) = RULES.get_or_init(|| {
        let text =
            std::fs::read_to_string(r::conf_dir().join("preload_config")).unwrap_or_default();
        // glibc's `program_invocation_short_name`, as rdma-core's matches it.
        let program = std::env::args_os()
            .next()
            .map(|a| {
                let p = std::path::PathBuf::from(a);
                p.file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        (parse_preload_config(&text), program)
    });
    intercepted(rules, program, domain, type_, protocol)
}
