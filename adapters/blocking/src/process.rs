//! A child-process provider client on blocking I/O.
//!
//! One supervisor thread owns the child and the core's sans-IO restart
//! supervisor ([`evidence_wire::supervisor::Supervisor`], which owns the
//! [`Client`](evidence_wire::client::Client) state machine). The child's
//! stdout is read by a reader thread, its stderr by a log thread (each line
//! goes through the [`StderrRelay`] to the [`LogSink`]), and its stdin is
//! written by a writer thread, so a child that stops reading can never
//! block the supervisor: the request times out and the child is restarted.
//! Neither can the sink: the relay drains the child's stderr whatever
//! happens, calls the sink from a thread of its own, and drops (and counts)
//! what it cannot pass on, so a stderr nobody reads never stalls a query or
//! its timeout. This file is plumbing only: it
//! spawns and kills the child, moves bytes and sleeps until the core's next
//! deadline; the restart policy lives in the core, the settings, errors and
//! the mapping of the supervisor's actions in
//! [`evidence_wire_provider::caller`].
//!
//! When the child exits, closes its output, desynchronizes its stream or
//! leaves a request unanswered past its timeout without answering anything
//! since it was sent (it looks hung), the affected requests fail
//! with a typed error and the child is restarted with bounded exponential
//! backoff (reset by any answer of the child). Queries that arrive while the
//! child is down wait for the fresh child, but never longer than their own
//! timeout; when the child cannot be started they fail with
//! [`ProviderError::Spawn`]. No request is silently lost or answered twice:
//! every call of [`ProcessProvider::query`] gets exactly one outcome.
//!
//! Limits: stderr is read in lines of at most 64 KiB and relayed under
//! [`ProcessConfig::stderr_limits`] (default: 16 KiB at once, then 2 KiB/s,
//! lines cut at 1 KiB, the rest dropped and summarised); the child's output is read in
//! 64 KiB chunks of which at most [`OUTPUT_QUEUE`] wait for the supervisor
//! (a child writing faster than it is decoded is slowed down, never
//! buffered without end); frame limits come from [`ClientConfig::limits`];
//! at most [`MAX_SKIPPED_LOGGED`] ignored messages are logged per child.
//!
//! [`MAX_SKIPPED_LOGGED`]: evidence_wire::supervisor::MAX_SKIPPED_LOGGED

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::thread;
use std::time::{Duration, Instant};

use evidence_wire::evidence::{EvidenceContext, EvidenceQuery, VerifiedEvidence};
use evidence_wire_provider::caller::relay::StderrRelay;
use evidence_wire_provider::caller::{
    MAX_STDERR_LINE, ProcessConfig, ProcessCore, ProviderError, SpawnError, Step,
};

#[cfg(doc)]
use evidence_wire::client::ClientConfig;

/// Bytes read from the child's stdout at once.
const READ_CHUNK: usize = 64 * 1024;
/// Output chunks read from the child but not yet decoded, at most.
pub const OUTPUT_QUEUE: usize = 16;

type Reply = Sender<Result<VerifiedEvidence, ProviderError>>;

enum Instruction {
    Query(Box<(EvidenceQuery, EvidenceContext)>, Reply),
    Output(u64, Vec<u8>),
    OutputEnd(u64),
    Shutdown,
}

/// A provider running as a child process. Cheap to clone; every clone
/// talks to the same child. Dropping the last clone stops the child.
#[derive(Clone)]
pub struct ProcessProvider {
    commands: Sender<Instruction>,
    _guard: Arc<ShutdownGuard>,
}

struct ShutdownGuard(Sender<Instruction>);

impl Drop for ShutdownGuard {
    fn drop(&mut self) {
        let _ = self.0.send(Instruction::Shutdown);
    }
}

impl ProcessProvider {
    /// Start the supervisor and the child. Fails when the child cannot be
    /// started the first time.
    pub fn spawn(config: ProcessConfig) -> Result<Self, ProviderError> {
        let (commands, receiver) = mpsc::channel();
        let command = config.command.clone();
        let mut supervisor = Supervisor::new(&config, commands.clone());
        supervisor.start_first_child()?;
        thread::Builder::new()
            .name("evidence-wire-provider".into())
            .spawn(move || supervisor.run(receiver))
            .map_err(|source| ProviderError::Spawn { command, source })?;
        Ok(ProcessProvider {
            _guard: Arc::new(ShutdownGuard(commands.clone())),
            commands,
        })
    }

    /// Ask one query and wait for its verified answer (or its typed failure).
    pub fn query(
        &self,
        query: EvidenceQuery,
        context: EvidenceContext,
    ) -> Result<VerifiedEvidence, ProviderError> {
        let (reply, answer) = mpsc::channel();
        self.commands
            .send(Instruction::Query(Box::new((query, context)), reply))
            .map_err(|_| ProviderError::ShutDown)?;
        answer.recv().unwrap_or(Err(ProviderError::ShutDown))
    }
}

struct Running {
    child: Child,
    generation: u64,
    stdin: Sender<Vec<u8>>,
    /// One token per output chunk queued by the reader thread; taken back
    /// when the chunk is decoded. Dropping it stops the reader.
    output_credit: Receiver<()>,
}

/// The plumbing around the core supervisor (which decides about deferred
/// queries, timeouts, restarts and backoff): the child process, its pump
/// threads, the clock, and the reply channels.
struct Supervisor {
    core: ProcessCore<Reply>,
    commands: Sender<Instruction>,
    running: Option<Running>,
    generation: u64,
    epoch: Instant,
}

impl Supervisor {
    fn new(config: &ProcessConfig, commands: Sender<Instruction>) -> Self {
        Supervisor {
            core: ProcessCore::new(config),
            commands,
            running: None,
            generation: 0,
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Start the first child (before the supervisor thread runs).
    fn start_first_child(&mut self) -> Result<(), ProviderError> {
        self.start_child()?;
        let now = self.now();
        self.core.child_started(now);
        self.perform();
        Ok(())
    }

    fn start_child(&mut self) -> Result<(), SpawnError> {
        let (program, args) = self.core.program()?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| self.core.spawn_error(&error))?;
        self.generation += 1;
        let generation = self.generation;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let stdin = child.stdin.take();
        let (credit_tx, output_credit) = mpsc::sync_channel::<()>(OUTPUT_QUEUE);
        if let Some(stdout) = stdout {
            let commands = self.commands.clone();
            let _ = thread::Builder::new()
                .name("evidence-wire-provider-stdout".into())
                .spawn(move || read_loop(stdout, generation, &commands, &credit_tx));
        }
        if let Some(stderr) = stderr {
            let relay = self.core.relay().clone();
            let _ = thread::Builder::new()
                .name("evidence-wire-provider-stderr".into())
                .spawn(move || stderr_loop(stderr, &relay));
        }
        let (stdin_tx, stdin_rx) = mpsc::channel::<Vec<u8>>();
        if let Some(stdin) = stdin {
            let _ = thread::Builder::new()
                .name("evidence-wire-provider-stdin".into())
                .spawn(move || write_loop(stdin, stdin_rx));
        }
        self.running = Some(Running {
            child,
            generation,
            stdin: stdin_tx,
            output_credit,
        });
        Ok(())
    }

    fn stop_child(&mut self) {
        if let Some(mut running) = self.running.take() {
            let _ = running.child.kill();
            let _ = running.child.wait();
        }
    }

    fn run(mut self, commands: Receiver<Instruction>) {
        loop {
            self.flush();
            let command = match self.core.poll_timeout() {
                Some(at) => {
                    let at = self.epoch + Duration::from_millis(at);
                    commands.recv_timeout(at.saturating_duration_since(Instant::now()))
                }
                None => commands.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let now = self.now();
            match command {
                Ok(Instruction::Query(request, reply)) => {
                    let (query, context) = *request;
                    self.core.query(query, context, reply, now);
                }
                Ok(Instruction::Output(generation, bytes)) => {
                    if let Some(running) = self
                        .running
                        .as_ref()
                        .filter(|running| running.generation == generation)
                    {
                        // The chunk is out of the queue: the reader may read
                        // the next one.
                        let _ = running.output_credit.try_recv();
                        self.core.handle_input(&bytes, now);
                    }
                }
                Ok(Instruction::OutputEnd(generation)) => {
                    if self.is_current(generation) {
                        self.core.handle_end_of_input(now);
                    }
                }
                Ok(Instruction::Shutdown) | Err(RecvTimeoutError::Disconnected) => {
                    self.core.shutdown();
                    self.perform();
                    self.stop_child();
                    return;
                }
                Err(RecvTimeoutError::Timeout) => self.core.handle_timeout(now),
            }
            self.perform();
        }
    }

    /// Do what the core supervisor asks, in order.
    fn perform(&mut self) {
        while let Some(step) = self.core.poll() {
            match step {
                Step::Spawn => {
                    self.stop_child();
                    let started = self.start_child();
                    let now = self.now();
                    self.core.started(now, started);
                }
                Step::Kill => self.stop_child(),
                Step::Answer(reply, outcome) => {
                    let _ = reply.send(outcome);
                }
            }
        }
    }

    fn is_current(&self, generation: u64) -> bool {
        self.running
            .as_ref()
            .is_some_and(|running| running.generation == generation)
    }

    fn flush(&mut self) {
        let Some(running) = &self.running else {
            // Nothing to write to: the client is reset before the next child.
            return;
        };
        while let Some(bytes) = self.core.poll_transmit() {
            if running.stdin.send(bytes).is_err() {
                break;
            }
        }
    }
}

/// Moves the child's stdout to the supervisor in chunks; waits for a
/// credit before queuing each, so at most [`OUTPUT_QUEUE`] chunks wait.
/// Ends at the child's end of output, or when the supervisor no longer
/// listens to this child (its credit receiver was dropped).
fn read_loop(
    mut stdout: std::process::ChildStdout,
    generation: u64,
    commands: &Sender<Instruction>,
    credit: &SyncSender<()>,
) {
    let mut buffer = vec![0u8; READ_CHUNK];
    loop {
        match stdout.read(&mut buffer) {
            Ok(0) | Err(_) => {
                let _ = commands.send(Instruction::OutputEnd(generation));
                return;
            }
            Ok(read) => {
                if credit.send(()).is_err() {
                    return;
                }
                let bytes = buffer.get(..read).unwrap_or_default().to_vec();
                if commands
                    .send(Instruction::Output(generation, bytes))
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Drains the child's stderr into the relay, one line (or 64 KiB piece)
/// at a time, until its end; the relay never blocks, so neither does this.
fn stderr_loop(stderr: std::process::ChildStderr, relay: &StderrRelay) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    let limit = u64::try_from(MAX_STDERR_LINE).unwrap_or(u64::MAX);
    loop {
        line.clear();
        match (&mut reader).take(limit).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => relay.line(&line),
        }
    }
    relay.end_of_stream();
}

fn write_loop(mut stdin: ChildStdin, bytes: Receiver<Vec<u8>>) {
    while let Ok(chunk) = bytes.recv() {
        if stdin.write_all(&chunk).is_err() || stdin.flush().is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_command_is_a_spawn_error() {
        let error = ProcessProvider::spawn(ProcessConfig::new(Vec::new()))
            .err()
            .map(|error| matches!(error, ProviderError::Spawn { .. }));
        assert_eq!(error, Some(true));
    }
}
