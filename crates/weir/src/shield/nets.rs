//! Lists of addresses and CIDR networks, tested per connection or request (the `ip` filter,
//! the shield's allow list and PROXY protocol sources).

use std::net::IpAddr;

use ipnet::IpNet;

/// Networks as (address, mask) integers: a test is an AND and a compare (`IpNet::contains`
/// through its generic path cost ~45 instructions a network).
#[derive(Debug, Default)]
pub struct Nets {
    v4: Vec<(u32, u32)>,
    v6: Vec<(u128, u128)>,
}

impl Nets {
    pub fn of(nets: &[IpNet]) -> Nets {
        let mut n = Nets::default();
        for net in nets {
            match net {
                IpNet::V4(v) => n.v4.push((u32::from(v.network()), u32::from(v.netmask()))),
                IpNet::V6(v) => {
                    n.v6.push((u128::from(v.network()), u128::from(v.netmask())))
                }
            }
        }
        n
    }

    pub fn is_empty(&self) -> bool {
        self.v4.is_empty() && self.v6.is_empty()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4.iter().any(|(net, mask)| a & mask == *net)
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6.iter().any(|(net, mask)| a & mask == *net)
            }
        }
    }
}

/// An address or CIDR (`10.0.0.0/8`, `::1`, `192.0.2.7`).
pub fn parse(s: &str) -> Option<IpNet> {
    s.parse::<IpNet>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(IpNet::from))
}

/// The networks of a config list, or the key of the first entry that is not one.
pub fn compile(items: &[String], path: &str) -> Result<Nets, crate::config::CompileError> {
    Ok(Nets::of(&parse_all(items, path)?))
}

/// [`parse`] over a config list at `path`, naming the first entry that is not one.
pub fn parse_all(items: &[String], path: &str) -> Result<Vec<IpNet>, crate::config::CompileError> {
    let mut nets = Vec::with_capacity(items.len());
    for (i, s) in items.iter().enumerate() {
        nets.push(parse(s.trim()).ok_or_else(|| {
            (
                format!("{path}[{i}]"),
                format!("{s:?} is not an address or CIDR"),
            )
        })?);
    }
    Ok(nets)
}
