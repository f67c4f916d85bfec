//! `rverbs link`: software RDMA links over RDMA netlink, like iproute2's `rdma link`.

use std::ffi::OsString;

use rverbs::uverbs::netlink::RdmaNetlink;

use crate::{usage_err, CmdResult};

pub const USAGE: &str = "\
Usage: rverbs link add NAME type TYPE netdev NETDEV
       rverbs link show [NAME[/PORT]]
       rverbs link delete NAME

  add     create a software RDMA device NAME of TYPE (rxe) on network interface NETDEV
  show    list the ports of all RDMA devices (or of NAME): state, physical state, netdev
  delete  remove the software RDMA device NAME
";

/// A parsed `rverbs link` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkCmd {
    Add {
        name: String,
        link_type: String,
        netdev: String,
    },
    Show {
        name: Option<String>,
        port: Option<u32>,
    },
    Delete {
        name: String,
    },
}

fn words(args: Vec<OsString>) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    args.into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| usage_err(format!("argument {a:?} is not valid UTF-8")))
        })
        .collect()
}

/// Parses the words after `link`.
pub fn parse(args: Vec<OsString>) -> Result<LinkCmd, Box<dyn std::error::Error>> {
    let w = words(args)?;
    let Some((verb, rest)) = w.split_first() else {
        return Ok(LinkCmd::Show {
            name: None,
            port: None,
        });
    };
    match verb.as_str() {
        "add" => {
            let Some((name, mut kv)) = rest.split_first() else {
                return Err(usage_err("link add: missing device NAME"));
            };
            let (mut link_type, mut netdev) = (None, None);
            while let Some((k, r)) = kv.split_first() {
                let Some((v, r)) = r.split_first() else {
                    return Err(usage_err(format!("link add: {k:?} needs a value")));
                };
                match k.as_str() {
                    "type" => link_type = Some(v.clone()),
                    "netdev" => netdev = Some(v.clone()),
                    other => {
                        return Err(usage_err(format!(
                            "link add: unknown keyword {other:?} (expected `type` or `netdev`)"
                        )))
                    }
                }
                kv = r;
            }
            let link_type =
                link_type.ok_or_else(|| usage_err("link add: missing `type TYPE` (e.g. rxe)"))?;
            let netdev = netdev.ok_or_else(|| usage_err("link add: missing `netdev NETDEV`"))?;
            Ok(LinkCmd::Add {
                name: name.clone(),
                link_type,
                netdev,
            })
        }
        "show" | "list" => match rest {
            [] => Ok(LinkCmd::Show {
                name: None,
                port: None,
            }),
            [one] => {
                let (name, port) = match one.split_once('/') {
                    Some((n, p)) => {
                        let p = p.parse::<u32>().map_err(|_| {
                            usage_err(format!("link show: bad port {p:?} in {one:?}"))
                        })?;
                        (n.to_string(), Some(p))
                    }
                    None => (one.clone(), None),
                };
                Ok(LinkCmd::Show {
                    name: Some(name),
                    port,
                })
            }
            _ => Err(usage_err("link show: takes at most one NAME[/PORT]")),
        },
        "delete" | "del" => match rest {
            [name] => Ok(LinkCmd::Delete { name: name.clone() }),
            [] => Err(usage_err("link delete: missing device NAME")),
            _ => Err(usage_err("link delete: takes exactly one NAME")),
        },
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Err(Box::new(Handled))
        }
        other => Err(usage_err(format!(
            "unknown link command {other:?} (expected add, show or delete)"
        ))),
    }
}

/// `link help` printed its text already; nothing more to say.
#[derive(Debug)]
struct Handled;

impl std::fmt::Display for Handled {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        Ok(())
    }
}

impl std::error::Error for Handled {}

pub fn run(args: Vec<OsString>) -> CmdResult {
    let cmd = match parse(args) {
        Err(e) if e.is::<Handled>() => return Ok(()),
        r => r?,
    };
    let mut nl = RdmaNetlink::open()?;
    match cmd {
        LinkCmd::Add {
            name,
            link_type,
            netdev,
        } => nl.link_add(&name, &link_type, &netdev)?,
        LinkCmd::Delete { name } => nl.link_delete(&name)?,
        LinkCmd::Show { name, port } => {
            let devs = match &name {
                Some(n) => vec![nl.device_by_name(n, "link show")?],
                None => nl.devices()?,
            };
            for d in devs {
                let ports = nl.ports(d.index)?;
                if let Some(p) = port {
                    if !ports.iter().any(|x| x.port == p) {
                        return Err(format!(
                            "{} has no port {p} (ports: {})",
                            d.name,
                            ports
                                .iter()
                                .map(|x| x.port.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                        .into());
                    }
                }
                for p in ports
                    .iter()
                    .filter(|x| port.map_or(true, |want| x.port == want))
                {
                    println!("{}", p.link_line());
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<LinkCmd, String> {
        parse(s.split_whitespace().map(OsString::from).collect()).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_add_in_any_keyword_order() {
        let want = LinkCmd::Add {
            name: "rxe0".into(),
            link_type: "rxe".into(),
            netdev: "d0".into(),
        };
        assert_eq!(p("add rxe0 type rxe netdev d0"), Ok(want.clone()));
        assert_eq!(p("add rxe0 netdev d0 type rxe"), Ok(want));
    }

    #[test]
    fn add_errors_name_what_is_missing() {
        assert!(p("add").unwrap_err().contains("missing device NAME"));
        assert!(p("add rxe0 type rxe").unwrap_err().contains("netdev"));
        assert!(p("add rxe0 netdev d0").unwrap_err().contains("type"));
        assert!(p("add rxe0 type").unwrap_err().contains("needs a value"));
        assert!(p("add rxe0 colour red").unwrap_err().contains("\"colour\""));
    }

    #[test]
    fn parses_show_and_delete() {
        assert_eq!(
            p(""),
            Ok(LinkCmd::Show {
                name: None,
                port: None
            })
        );
        assert_eq!(
            p("show rxe0/1"),
            Ok(LinkCmd::Show {
                name: Some("rxe0".into()),
                port: Some(1)
            })
        );
        assert!(p("show rxe0/x").unwrap_err().contains("bad port"));
        assert_eq!(
            p("delete rxe1"),
            Ok(LinkCmd::Delete {
                name: "rxe1".into()
            })
        );
        assert_eq!(p("del rxe1"), p("delete rxe1"));
        assert!(p("delete").unwrap_err().contains("missing"));
        assert!(p("frobnicate")
            .unwrap_err()
            .contains("unknown link command"));
    }
}
