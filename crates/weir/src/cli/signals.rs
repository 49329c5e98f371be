//! The control loop of `weir run`: signals (SIGHUP reloads, SIGUSR1 reopens access logs, SIGUSR2
//! starts a binary upgrade, SIGTERM/SIGINT stop), `POST /reload`, and the watched config
//! directories, all reloading through one [`Reloader`] on this one task.

use std::path::PathBuf;

use super::{hand_over, handover, notify, upgrade};
use crate::reload::{watch::DirWatch, Outcome, Reloader, Why};
use crate::server;

/// Reloads with systemd told (RELOADING, then READY) when the config is rebuilt.
fn reload(handle: &server::ServerHandle, reloader: &mut Reloader, why: Why) -> Result<(), String> {
    notify::notify("RELOADING=1");
    let result = reloader.reload(handle, why).map(|_: Outcome| ());
    notify::notify("READY=1");
    result
}

/// Starts, retargets or stops the directory watch to match the running config.
fn sync_watch(
    handle: &server::ServerHandle,
    reloader: &Reloader,
    watch: &mut Option<DirWatch>,
    tx: &tokio::sync::mpsc::UnboundedSender<()>,
) {
    if handle.config().watch.is_none() || reloader.path().is_none() {
        *watch = None;
        return;
    }
    match watch {
        Some(w) => w.set(&reloader.dirs),
        None => match DirWatch::start(&reloader.dirs, tx.clone()) {
            Ok(w) => *watch = Some(w),
            Err(e) => tracing::warn!(error = %e, "config directories not watched"),
        },
    }
}

/// Starts, restarts or stops the Kubernetes provider to match the running config. A provider
/// stopped takes its fragment with it: `true` when that asks for a reload.
fn sync_provider(
    handle: &server::ServerHandle,
    reloader: &Reloader,
    provider: &mut Option<crate::providers::kubernetes::Provider>,
    tx: &tokio::sync::mpsc::UnboundedSender<crate::providers::kubernetes::Ask>,
) -> bool {
    let wanted = handle.config().kubernetes.clone();
    if provider.as_ref().map(|p| &p.settings) == wanted.as_ref() {
        return false;
    }
    if let Some(p) = provider.take() {
        p.stop();
    }
    let had = !std::mem::take(&mut *reloader.provided.lock().unwrap_or_else(|e| e.into_inner()))
        .is_empty();
    if let Some(settings) = wanted {
        tracing::info!(controller = %settings.controller_name, "Kubernetes provider started");
        let texts = crate::providers::kubernetes::publish::Base {
            path: reloader.path().map(|p| p.to_path_buf()),
            fragments: reloader.fragments.clone(),
        };
        *provider = Some(crate::providers::kubernetes::Provider::spawn(
            settings,
            (reloader.provided.clone(), texts),
            tx.clone(),
        ));
    }
    had
}

/// Blocks until SIGINT/SIGTERM, shuts down gracefully; a second signal exits at once.
pub(super) fn wait_for_signals(
    handle: server::ServerHandle,
    mut reloader: Reloader,
    (mut taken_over, socket): (tokio::sync::mpsc::UnboundedReceiver<()>, Option<PathBuf>),
    ready: impl FnOnce(&server::ServerHandle),
) {
    // Where this binary was started from, read now: once an install replaces the file,
    // /proc/self/exe names the deleted old one.
    let exe = std::env::current_exe().ok();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir: cannot wait for signals: {e}");
            handle.join();
            return;
        }
    };
    rt.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1), Ok(mut usr2)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
            signal(SignalKind::user_defined1()),
            signal(SignalKind::user_defined2()),
        ) else {
            eprintln!("weir: cannot install signal handlers");
            return;
        };
        // `POST /reload` on the admin API asks here, like SIGHUP.
        let (tx, mut asked) = tokio::sync::mpsc::unbounded_channel();
        *handle
            .registry()
            .reloader
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(tx);
        // etcd's task (config fragments and members) asks here too.
        let (cluster_tx, mut cluster_asks) = tokio::sync::mpsc::unbounded_channel();
        let etcd = handle
            .config()
            .cluster
            .clone()
            .filter(|c| !c.etcd.is_empty())
            .map(|c| crate::cluster::etcd::spawn(c, reloader.fragments.clone(), cluster_tx));
        let (files_tx, mut files) = tokio::sync::mpsc::unbounded_channel();
        let mut watch = None;
        sync_watch(&handle, &reloader, &mut watch, &files_tx);
        // The Kubernetes provider asks here, with a channel for the outcome.
        let (kube_tx, mut kube_asks) = tokio::sync::mpsc::unbounded_channel();
        let mut provider = None;
        sync_provider(&handle, &reloader, &mut provider, &kube_tx);
        // Ready only now: a SIGHUP or a `POST /reload` sent as soon as weir says it serves must
        // find its handler (the reloader was once registered after, and a fast client's reload
        // was answered "not started by `weir run`").
        ready(&handle);
        let drain = loop {
            let why = tokio::select! {
                _ = term.recv() => break false,
                _ = int.recv() => break false,
                Some(()) = taken_over.recv() => break true,
                _ = hup.recv() => Why::Signal,
                Some(answer) = asked.recv() => {
                    let _ = answer.send(reload(&handle, &mut reloader, Why::Admin));
                    sync_watch(&handle, &reloader, &mut watch, &files_tx);
                    if sync_provider(&handle, &reloader, &mut provider, &kube_tx) {
                        let _ = reload(&handle, &mut reloader, Why::Kubernetes);
                    }
                    continue;
                }
                Some(answer) = kube_asks.recv() => {
                    let _ = answer.send(reload(&handle, &mut reloader, Why::Kubernetes));
                    sync_watch(&handle, &reloader, &mut watch, &files_tx);
                    continue;
                }
                Some(()) = files.recv() => {
                    // Debounce: an editor's save is several events; a `cp -r` of a conf.d many.
                    let debounce = handle.config().watch.unwrap_or_default();
                    tokio::time::sleep(debounce).await;
                    while files.try_recv().is_ok() {}
                    Why::Files
                }
                Some(change) = cluster_asks.recv() => match change {
                    crate::cluster::Change::Config => Why::Etcd,
                    crate::cluster::Change::Members => Why::Members,
                    crate::cluster::Change::Rejoined(done) => {
                        let mut dropped = 0;
                        for z in &handle.config().cache_zones {
                            dropped += z.purge_now(&weir_cache::PurgeSelector::All, false);
                        }
                        tracing::warn!(objects = dropped, "cache zones emptied on rejoining the cluster");
                        let _ = done.send(());
                        continue;
                    }
                },
                _ = usr1.recv() => {
                    tracing::info!("reopening access logs");
                    handle.registry().sinks.reopen();
                    continue;
                }
                _ = usr2.recv() => {
                    let started = exe
                        .as_deref()
                        .ok_or_else(|| "cannot tell which binary this is".to_string())
                        .and_then(upgrade::spawn_new);
                    if let Err(e) = started {
                        tracing::error!(error = %e, "binary upgrade not started");
                    }
                    continue;
                }
            };
            let _ = reload(&handle, &mut reloader, why);
            sync_watch(&handle, &reloader, &mut watch, &files_tx);
            if sync_provider(&handle, &reloader, &mut provider, &kube_tx) {
                let _ = reload(&handle, &mut reloader, Why::Kubernetes);
            }
        };
        drop(watch);
        if let Some(p) = provider.take() {
            match drain {
                // The new process serves now, under the same identity when one is configured:
                // the Lease it renews is not emptied by this one (attack review, 2026-11-30).
                true => p.stop(),
                false => p.shutdown().await,
            }
        }
        if drain {
            // The new process is the service now: it tells systemd its own MAINPID.
            tracing::info!("draining: each idle connection answers one more request, then closes");
            handle.drain();
            hand_over(&handle.registry());
            if let Some(socket) = &socket {
                handover::write(&handle.registry(), socket);
            }
            if let Some(session) = &etcd {
                session.stop();
            }
        } else {
            notify::notify("STOPPING=1");
            if let Some(session) = etcd {
                // The others stop sending this node peer fills and purges now.
                session.leave().await;
            }
            tracing::info!(
                "shutting down: finishing in-flight requests (a second signal stops at once)"
            );
            handle.shutdown();
        }
        let registry = handle.registry();
        let join = tokio::task::spawn_blocking(move || {
            let registry = handle.registry();
            handle.join();
            hand_over(&registry);
        });
        let pid_file = registry.process.pid_file.get().cloned();
        let at_once = move || {
            if let Some(p) = &pid_file {
                super::pidfile::remove_if_ours(std::path::Path::new(p));
            }
            std::process::exit(130)
        };
        tokio::select! {
            _ = join => tracing::info!("stopped"),
            _ = term.recv() => at_once(),
            _ = int.recv() => at_once(),
        }
    });
}
