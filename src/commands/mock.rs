//! `netchaos mock`: the built-in upstream as a standalone server, for
//! clients pointed at a base URL (and Toxiproxy-style setups: a proxy in
//! front of it).

use std::sync::Arc;

use super::{announce_seed, quiet, runtime};
use crate::cli::{Global, MockArgs};
use crate::error::{Error, Result};
use crate::mock::{Api, Mock, server::Server};

pub(super) fn run(g: &Global, args: &MockArgs) -> Result<u8> {
    let listen = crate::plan::parse_listen(&args.listen)
        .map_err(|e| Error::Usage(format!("--listen {}: expected {e}", args.listen)))?;
    let apis = Api::parse_list(&args.api).map_err(|e| Error::Usage(format!("--api: {e}")))?;
    let timing = args.timing.timing()?;
    let cassette = match args.from.is_empty() {
        true => None,
        false => Some(
            crate::mock::cassette::Cassette::load(&args.from)
                .map_err(Error::Usage)?
                .any_host(),
        ),
    };
    let seed = g.seed.unwrap_or_else(rand::random);
    let rt = runtime()?;
    rt.block_on(async {
        let listener = crate::relay::bind(listen).map_err(|e| Error::Runtime(e.into()))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Runtime(e.into()))?;
        announce_seed(seed);
        let names: Vec<&str> = apis.iter().map(|a| a.name()).collect();
        eprintln!("netchaos: mock ({}) listening on {addr}", names.join(", "));
        if !quiet() {
            let mut hints = Vec::new();
            if apis.contains(&Api::Anthropic) {
                hints.push(format!("ANTHROPIC_BASE_URL=http://{addr}"));
            }
            if apis.contains(&Api::OpenAi) {
                hints.push(format!("OPENAI_BASE_URL=http://{addr}/v1"));
            }
            if apis.contains(&Api::Gemini) {
                hints.push(format!("GOOGLE_GEMINI_BASE_URL=http://{addr}"));
            }
            eprintln!("netchaos: clients: {} (any API key)", hints.join(" "));
        }
        let mut mock = Mock::new(apis, seed, timing);
        if let Some(c) = cassette {
            eprintln!("netchaos: answering from {} first", c.dirs);
            mock = mock.with_cassette(Arc::new(c), Vec::new());
        }
        let mock = Arc::new(mock);
        let stop = tokio_util::sync::CancellationToken::new();
        let serving = tokio::spawn(Server::new(mock, None).serve(listener, stop.clone()));
        // Handlers before "ready": a signal sent on reading it must find them.
        let mut signals = super::ShutdownSignals::install()?;
        eprintln!("netchaos: ready");
        let sig = signals.recv().await;
        eprintln!(
            "netchaos: {sig}: shutting down (open answers get {})",
            crate::units::format_duration(crate::mock::server::DRAIN)
        );
        stop.cancel();
        let _ = serving.await;
        Ok(0)
    })
}
