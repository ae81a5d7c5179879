//! The `processes` target: a gateway in this process in front of replica processes of this same binary
//! (`bench serve --role replica`) on loopback ports, over the replica protocol (gRPC), as a scaled-out deployment
//! runs them. The engine setting `replicas` is the number of processes, so a sweep's axis over it is an axis over
//! replica processes; each gets `threads` compute threads (0: the cores shared out between them). A fault step
//! kills one with SIGKILL mid-step ([`Target::kill_replica`]) and starts it again on its port afterwards.

use std::io::{BufRead, BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use engine::gateway::{Gateway, GatewayConfig};
use engine::replica::RemoteConfig;
use engine::{EngineConfig, ModelFront, Priority};

use super::{BoxFuture, EngineSetup, Failure, InProcess, Reply, Target, Telemetry};
use crate::workload::Request;

/// How long a restarted replica may take to be taken back by the gateway.
const RESTORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// One replica process and the port it serves on.
struct Replica {
    child: Child,
    /// Held open: the process writes its listening line there, and a closed pipe must not fail a later write.
    _stdout: BufReader<ChildStdout>,
    port: u16,
}

impl Replica {
    /// Starts `bench serve --role replica` with the settings in `config_file` on `port` (0: any free one) and
    /// waits for its listening line.
    fn start(model_dir: &Path, config_file: &Path, port: u16) -> Result<Replica> {
        let exe = std::env::current_exe().context("finding this program to start replicas")?;
        // Its standard error goes to a file, not over the harness's progress bars; read back if it fails to start.
        let mut log = tempfile::tempfile().context("creating a replica's log file")?;
        let stderr = log.try_clone().context("creating a replica's log file")?;
        let mut child = Command::new(exe)
            .args([
                "serve",
                "--role",
                "replica",
                "--host",
                "127.0.0.1",
                "--port",
            ])
            .arg(port.to_string())
            .arg("--model")
            .arg(model_dir)
            .arg("--config")
            .arg(config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .context("starting a replica process")?;
        let Some(stdout) = child.stdout.take() else {
            bail!("a replica process has no standard output");
        };
        let mut stdout = BufReader::new(stdout);
        let mut line = String::new();
        loop {
            line.clear();
            if stdout
                .read_line(&mut line)
                .context("reading a replica's output")?
                == 0
            {
                let status = child.wait().ok();
                let mut said = String::new();
                let _ = log.rewind().and_then(|()| log.read_to_string(&mut said));
                // Its first lines: the error comes before any backtrace.
                let said = said.trim();
                let mut end = said.len().min(2000);
                while !said.is_char_boundary(end) {
                    end -= 1;
                }
                let head = &said[..end];
                bail!(
                    "a replica process on port {port} exited before listening ({status:?}); its stderr:\n{head}"
                );
            }
            if let Some(addr) = line.trim().strip_prefix("listening on http://") {
                let port = addr
                    .rsplit_once(':')
                    .and_then(|(_, p)| p.parse().ok())
                    .with_context(|| format!("a replica listens on `{addr}`: no port"))?;
                return Ok(Replica {
                    child,
                    _stdout: stdout,
                    port,
                });
            }
        }
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Replica processes behind a gateway in this process; every one is stopped when this is dropped.
pub struct Processes {
    gateway: InProcess,
    model_dir: PathBuf,
    /// The replicas' engine settings (`replicas` 1, the threads resolved), which they read at start-up.
    config_file: tempfile::NamedTempFile,
    replicas: Mutex<Vec<Replica>>,
    /// Ports of replicas killed by a fault and not yet started again.
    killed: Mutex<Vec<u16>>,
}

impl Processes {
    /// Starts `setup.config.replicas` replica processes and the gateway. Call within a multi-threaded tokio
    /// runtime.
    pub fn start(setup: EngineSetup, gateway_config: GatewayConfig) -> Result<Processes> {
        let count = setup.config.replicas.max(1);
        let threads = match setup.config.threads {
            0 => (setup.config.resolved_threads() / count).max(1),
            n => n,
        };
        let replica_config = EngineConfig {
            replicas: 1,
            threads,
            ..setup.config.clone()
        };
        let mut config_file =
            tempfile::NamedTempFile::new().context("writing the replicas' settings")?;
        std::io::Write::write_all(&mut config_file, replica_config.to_toml()?.as_bytes())
            .context("writing the replicas' settings")?;
        let replicas = (0..count)
            .map(|_| Replica::start(setup.model_dir, config_file.path(), 0))
            .collect::<Result<Vec<_>>>()?;
        (setup.say)(format!(
            "{count} replica processes ({threads} threads each) on ports {}",
            replicas
                .iter()
                .map(|r| r.port.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
        let targets = replicas
            .iter()
            .map(|r| format!("127.0.0.1:{}", r.port))
            .collect();
        let front = ModelFront::load(setup.model_dir, setup.config.clone())
            .context("reading the model's tokenizer")?;
        let remote = Gateway::remote(front, targets, RemoteConfig::default(), gateway_config);
        let handle = tokio::runtime::Handle::current();
        let gateway = tokio::task::block_in_place(|| handle.block_on(remote))
            .context("starting the gateway in front of the replica processes")?;
        Ok(Processes {
            gateway: InProcess::new(gateway),
            model_dir: setup.model_dir.to_owned(),
            config_file,
            replicas: Mutex::new(replicas),
            killed: Mutex::new(Vec::new()),
        })
    }
}

impl Target for Processes {
    fn embed(&self, request: Request, priority: Priority) -> BoxFuture<Result<Reply, Failure>> {
        self.gateway.embed(request, priority)
    }

    fn telemetry(&self) -> BoxFuture<Option<Telemetry>> {
        self.gateway.telemetry()
    }

    fn settle(&self) -> BoxFuture<()> {
        self.gateway.settle()
    }

    fn kill_replica(&self) -> Result<String> {
        let mut replicas = self.replicas.lock().unwrap_or_else(|e| e.into_inner());
        let Some(mut replica) = replicas.pop() else {
            bail!("no replica process is left to kill");
        };
        let pid = replica.child.id();
        replica.stop();
        self.killed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(replica.port);
        Ok(format!(
            "replica process {pid} on port {} killed (SIGKILL)",
            replica.port
        ))
    }

    fn restore(&self) -> BoxFuture<Result<()>> {
        let ports: Vec<u16> =
            std::mem::take(&mut *self.killed.lock().unwrap_or_else(|e| e.into_inner()));
        // Started again on their ports (the gateway knows replicas by address), then waited for until the
        // gateway's health checks have taken every replica back, so the next step starts at full strength.
        let started = tokio::task::block_in_place(|| {
            ports
                .into_iter()
                .map(|port| Replica::start(&self.model_dir, self.config_file.path(), port))
                .collect::<Result<Vec<_>>>()
        });
        let gateway = self.gateway.gateway();
        let restarted = started.map(|r| {
            self.replicas
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(r)
        });
        Box::pin(async move {
            restarted?;
            let deadline = tokio::time::Instant::now() + RESTORE_TIMEOUT;
            while !gateway.replica_states().iter().all(|(_, up)| *up) {
                if tokio::time::Instant::now() > deadline {
                    bail!("a restarted replica was not taken back within {RESTORE_TIMEOUT:?}");
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Ok(())
        })
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for r in self
            .replicas
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .iter_mut()
        {
            r.stop();
        }
    }
}
