//! Config from elsewhere than the file, served beside it (issue 56): [`kubernetes`], a
//! cluster's Gateway API and Ingress objects. A provider touches the runtime only through the
//! config fragment it publishes and the reload path every source shares (`reload/`).

pub mod kubernetes;
