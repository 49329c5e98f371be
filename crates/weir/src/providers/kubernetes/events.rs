//! What the conversion left out or refused, told on the object itself: a `Warning` event
//! (`reason: NotTranslated`, the note as its message) on the Ingress, HTTPRoute or Gateway the
//! note names, as `kubectl describe` shows them: an untranslated annotation or snippet is never
//! silently dropped (issue 56 §2). Written by the replica holding the Lease, each note once per
//! object version (a changed object, or a new replica, says it again); the log line is
//! `mod.rs`'s.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_yaml::Value;

/// Rate limit of the "event not written" lines.
static EVENT_LOG: crate::logs::Limited = crate::logs::Limited::new();

/// At most this many events a rebuild (a namespace with thousands of notes is told over
/// several rebuilds, not in one burst at the API server).
const PER_REBUILD: usize = 50;

/// The notes already told, by (object uid, resourceVersion, note).
#[derive(Debug, Default)]
pub struct Told(HashSet<(String, String, String)>);

/// The object a note names (`Ingress web/api: …`), among `objects`.
fn object_of<'a>(note: &str, objects: &'a [Value]) -> Option<&'a Value> {
    let (kind, rest) = note.split_once(' ')?;
    let (id, _) = rest.split_once(':')?;
    let (ns, name) = id.split_once('/')?;
    objects.iter().find(|o| {
        o["kind"].as_str() == Some(kind)
            && o["metadata"]["namespace"].as_str() == Some(ns)
            && o["metadata"]["name"].as_str() == Some(name)
    })
}

impl Told {
    /// Writes an event for each note not told yet for its object's version.
    pub async fn tell(&mut self, client: &Client, notes: &[String], objects: &[Value]) {
        // What was told of object versions that are gone is forgotten: the set follows the
        // cluster, not its history.
        let current: HashSet<(&str, &str)> = objects
            .iter()
            .map(|o| {
                (
                    o["metadata"]["uid"].as_str().unwrap_or(""),
                    o["metadata"]["resourceVersion"].as_str().unwrap_or(""),
                )
            })
            .collect();
        self.0
            .retain(|(uid, version, _)| current.contains(&(uid.as_str(), version.as_str())));
        let mut written = 0;
        for note in notes {
            let Some(obj) = object_of(note, objects) else {
                continue;
            };
            let meta = &obj["metadata"];
            let uid = meta["uid"].as_str().unwrap_or("").to_string();
            let version = meta["resourceVersion"].as_str().unwrap_or("").to_string();
            let key = (uid.clone(), version, note.clone());
            if self.0.contains(&key) {
                continue;
            }
            if written == PER_REBUILD {
                return;
            }
            written += 1;
            let ns = meta["namespace"].as_str().unwrap_or("default");
            let now = Time(Timestamp::now());
            let event = Event {
                metadata: ObjectMeta {
                    generate_name: Some(format!("{}.", meta["name"].as_str().unwrap_or("weir"))),
                    namespace: Some(ns.to_string()),
                    ..ObjectMeta::default()
                },
                involved_object: ObjectReference {
                    api_version: obj["apiVersion"].as_str().map(str::to_string),
                    kind: obj["kind"].as_str().map(str::to_string),
                    name: meta["name"].as_str().map(str::to_string),
                    namespace: Some(ns.to_string()),
                    uid: Some(uid),
                    resource_version: meta["resourceVersion"].as_str().map(str::to_string),
                    ..ObjectReference::default()
                },
                reason: Some("NotTranslated".into()),
                // The API caps an event's message at 1 KiB.
                message: Some(note.chars().take(1000).collect()),
                type_: Some("Warning".into()),
                source: Some(EventSource {
                    component: Some("weir".into()),
                    host: None,
                }),
                first_timestamp: Some(now.clone()),
                last_timestamp: Some(now),
                count: Some(1),
                ..Event::default()
            };
            let api: Api<Event> = Api::namespaced(client.clone(), ns);
            match api.create(&PostParams::default(), &event).await {
                Ok(_) => {
                    self.0.insert(key);
                }
                Err(e) => {
                    if let Some(suppressed) = EVENT_LOG.admit() {
                        tracing::warn!(error = %super::chain(&e), suppressed, "event not written");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_names_its_object() {
        let objects: Vec<Value> = serde_yaml::from_str(
            "[{kind: Ingress, metadata: {namespace: web, name: api}}, {kind: HTTPRoute, metadata: {namespace: web, name: api}}]",
        )
        .unwrap();
        let o = object_of(
            "HTTPRoute web/api: rule 0: timeouts not translated",
            &objects,
        )
        .unwrap();
        assert_eq!(o["kind"], "HTTPRoute");
        let o = object_of(
            "Ingress web/api: nginx.ingress.kubernetes.io/server-snippet: x",
            &objects,
        )
        .unwrap();
        assert_eq!(o["kind"], "Ingress");
        assert!(object_of("Ingress web/other: x", &objects).is_none());
        assert!(object_of("garbage", &objects).is_none());
    }
}
