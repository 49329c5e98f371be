//! What became of each Gateway listener and each HTTPRoute's parent reference in a
//! conversion: the facts `providers.kubernetes` writes into their status (issue 56 §1), with
//! the reasons the Gateway API names (`NotAllowedByListeners`, `NoMatchingListenerHostname`,
//! `NoMatchingParent`, `BackendNotFound`, `RefNotPermitted`, `InvalidKind`,
//! `InvalidCertificateRef`, `InvalidRouteKinds`, `UnsupportedProtocol`, `PortUnavailable`). `weir import` of files
//! prints the same facts as notes.

use serde_yaml::Value;

/// A condition that is not `True`: its type, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `Accepted` or `ResolvedRefs`.
    pub condition: &'static str,
    pub reason: String,
    pub message: String,
}

/// One listener of one of the converted Gateways.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerOutcome {
    /// (namespace, name) of its Gateway.
    pub gateway: (String, String),
    pub name: String,
    /// Routes attached to it.
    pub attached: u32,
    /// The route kinds it takes (`supportedKinds`): its protocol's, narrowed by
    /// `allowedRoutes.kinds`; empty for a listener left out.
    pub kinds: Vec<&'static str>,
    /// `None`: served.
    pub problem: Option<Problem>,
}

/// One parent reference of a route that names one of the converted Gateways.
#[derive(Debug, Clone, PartialEq)]
pub struct ParentOutcome {
    /// `HTTPRoute` or `GRPCRoute`.
    pub kind: String,
    /// (namespace, name) of the route.
    pub route: (String, String),
    /// The reference as the route wrote it (echoed in its status).
    pub parent: Value,
    /// `Accepted`: `Err((reason, message))` when not attached.
    pub accepted: Result<(), (String, String)>,
    /// `ResolvedRefs`: `Err((reason, message))` for the first backend that is not.
    pub resolved: Result<(), (String, String)>,
}

/// A conversion's outcomes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcomes {
    pub listeners: Vec<ListenerOutcome>,
    pub parents: Vec<ParentOutcome>,
    /// Each route's first backend reference that did not resolve, by `HTTPRoute ns/name`.
    pub unresolved: Vec<(String, (String, String))>,
    /// A GRPCRoute is attached to the plain listener (which then takes h2c).
    pub grpc_plain: bool,
}

impl Outcomes {
    /// Records a listener that is left out.
    pub(super) fn listener_problem(
        &mut self,
        (gateway, name): (&(String, String), &str),
        condition: &'static str,
        reason: &str,
        message: String,
    ) {
        self.listeners.push(ListenerOutcome {
            gateway: gateway.clone(),
            name: name.to_string(),
            attached: 0,
            kinds: Vec::new(),
            problem: Some(Problem {
                condition,
                reason: reason.to_string(),
                message,
            }),
        });
    }

    /// Whether `gateway` is one of the converted Gateways.
    pub(super) fn has_gateway(&self, gateway: &(String, String)) -> bool {
        self.listeners.iter().any(|l| &l.gateway == gateway)
    }

    /// Counts a route attached to a listener.
    pub(super) fn attach(&mut self, gateway: &(String, String), name: &str) {
        if let Some(l) = self
            .listeners
            .iter_mut()
            .find(|l| &l.gateway == gateway && l.name == name)
        {
            l.attached += 1;
        }
    }

    /// Records a route's backend reference that does not resolve (`why` starts with its
    /// reason); the first one per route is kept.
    pub(super) fn unresolved(&mut self, route: &str, why: &str) {
        let reason = why.split(':').next().unwrap_or("");
        if !matches!(
            reason,
            "BackendNotFound" | "RefNotPermitted" | "InvalidKind"
        ) {
            return;
        }
        if !self.unresolved.iter().any(|(r, _)| r == route) {
            self.unresolved
                .push((route.to_string(), (reason.to_string(), why.to_string())));
        }
    }

    /// A route's `ResolvedRefs`.
    pub(super) fn resolved_of(&self, route: &str) -> Result<(), (String, String)> {
        match self.unresolved.iter().find(|(r, _)| r == route) {
            Some((_, e)) => Err(e.clone()),
            None => Ok(()),
        }
    }
}
