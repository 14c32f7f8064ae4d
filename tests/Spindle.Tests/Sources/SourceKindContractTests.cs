using System;
using System.Threading;
using System.Threading.Tasks;

namespace SpindleLib.Tests.Sources;

// The source contract (SourceContractTests) run against every kind of Spindle source.

/// <summary>Promise: one object, reused with Reset(); a completed use stays readable until the reset.</summary>
public sealed class PromiseContractTests : SourceContractTests
{
    private readonly Promise _promise = new();
    private bool _started;

    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: false, CanFault: true, RereadBehavior.ReturnsSameOutcome, RenewalKind.Reset, MultipleAwaiters: false, CompletesOnWorker: false);

    protected override SourceOperation Start()
    {
        if (_started)
        {
            _promise.Reset();
        }
        _started = true;
        return new Operation(_promise);
    }

    private sealed class Operation : SourceOperation
    {
        private readonly Promise _promise;
        private readonly SpindleTask _task;

        public Operation(Promise promise)
        {
            _promise = promise;
            _task = promise.Task;
        }

        public override SpindleTask Task => _task;

        public override bool HasValue => false;

        public override void Succeed(int value) => _promise.SetResult();

        public override void Fault(Exception exception) => _promise.SetException(exception);

        protected override void OnCancel(CancellationToken token) => _promise.SetCanceled(token);
    }
}

/// <summary>Promise&lt;T&gt;: as Promise, with a result.</summary>
public sealed class PromiseOfTContractTests : SourceContractTests
{
    private readonly Promise<int> _promise = new();
    private bool _started;

    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: true, CanFault: true, RereadBehavior.ReturnsSameOutcome, RenewalKind.Reset, MultipleAwaiters: false, CompletesOnWorker: false);

    protected override SourceOperation Start()
    {
        if (_started)
        {
            _promise.Reset();
        }
        _started = true;
        return new Operation(_promise);
    }

    private sealed class Operation : SourceOperation
    {
        private readonly Promise<int> _promise;
        private readonly SpindleTask<int> _task;

        public Operation(Promise<int> promise)
        {
            _promise = promise;
            _task = promise.Task;
        }

        public override SpindleTask Task => _task;

        public override SpindleTask<int> TypedTask => _task;

        public override bool HasValue => true;

        public override void Succeed(int value) => _promise.SetResult(value);

        public override void Fault(Exception exception) => _promise.SetException(exception);

        protected override void OnCancel(CancellationToken token) => _promise.SetCanceled(token);
    }
}

/// <summary>Signal: one object; each pending WaitAsync is a use, ended by Set() or by its token. It cannot fault.</summary>
public sealed class SignalContractTests : SourceContractTests
{
    private readonly Signal _signal = new();

    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: false, CanFault: false, RereadBehavior.ReturnsSameOutcome, RenewalKind.NextWait, MultipleAwaiters: false, CompletesOnWorker: false);

    protected override SourceOperation Start() => new Operation(_signal);

    private sealed class Operation : SourceOperation
    {
        private readonly Signal _signal;
        private readonly SpindleTask _task;

        public Operation(Signal signal)
        {
            _signal = signal;
            _task = signal.WaitAsync(CancellationToken);
        }

        public override SpindleTask Task => _task;

        public override bool HasValue => false;

        public override void Succeed(int value) => _signal.Set();

        protected override void OnCancel(CancellationToken token)
        {
            // Canceling the wait's token (done by the caller) is what ends the wait.
        }
    }
}

/// <summary>The pooled state-machine box of an <c>async SpindleTask</c> method suspended on a Promise.</summary>
public sealed class AsyncMethodBoxContractTests : SourceContractTests
{
    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: false, CanFault: true, RereadBehavior.Throws, RenewalKind.PoolReuse, MultipleAwaiters: false, CompletesOnWorker: false);

    protected override SourceOperation Start() => new Operation();

    private static async SpindleTask AwaitInBox(Promise inner) => await inner.Task;

    private sealed class Operation : SourceOperation
    {
        private readonly Promise _inner = new();
        private readonly SpindleTask _task;

        public Operation() => _task = AwaitInBox(_inner);

        public override SpindleTask Task => _task;

        public override bool HasValue => false;

        public override void Succeed(int value) => _inner.SetResult();

        public override void Fault(Exception exception) => _inner.SetException(exception);

        protected override void OnCancel(CancellationToken token) => _inner.SetCanceled(token);
    }
}

/// <summary>The pooled state-machine box of an <c>async SpindleTask&lt;int&gt;</c> method suspended on a Promise&lt;int&gt;.</summary>
public sealed class AsyncMethodBoxOfTContractTests : SourceContractTests
{
    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: true, CanFault: true, RereadBehavior.Throws, RenewalKind.PoolReuse, MultipleAwaiters: false, CompletesOnWorker: false);

    protected override SourceOperation Start() => new BoxOperation();

    internal static async SpindleTask<int> AwaitInBox(Promise<int> inner) => await inner.Task;

    internal sealed class BoxOperation : PromiseBackedOperation
    {
        public BoxOperation()
            : base(static inner => AwaitInBox(inner))
        {
        }
    }
}

/// <summary>
/// Spindle.Run's pooled RunItem. The delegate blocks its worker on a gate until the test chooses the outcome, so the
/// use stays pending as long as the test needs; completion then happens on the worker.
/// </summary>
public sealed class RunItemContractTests : SourceContractTests
{
    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: false, CanFault: true, RereadBehavior.Throws, RenewalKind.PoolReuse, MultipleAwaiters: false, CompletesOnWorker: true);

    protected override SourceOperation Start() => new RunItemOperation(hasValue: false);
}

/// <summary>Spindle.Run&lt;T&gt;'s pooled RunItem&lt;T&gt;.</summary>
public sealed class RunItemOfTContractTests : SourceContractTests
{
    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: true, CanFault: true, RereadBehavior.Throws, RenewalKind.PoolReuse, MultipleAwaiters: false, CompletesOnWorker: true);

    protected override SourceOperation Start() => new RunItemOperation(hasValue: true);
}

/// <summary>The gated Spindle.Run use shared by the two RunItem kinds.</summary>
internal sealed class RunItemOperation : SourceOperation
{
    private readonly ManualResetEventSlim _gate = new();
    private readonly bool _hasValue;
    private readonly SpindleTask _task;
    private readonly SpindleTask<int> _typed;
    private int _outcome; // 0 success, 1 fault, 2 cancel
    private int _value;
    private Exception? _error;

    public RunItemOperation(bool hasValue)
    {
        _hasValue = hasValue;
        if (hasValue)
        {
            _typed = Spindle.Run<int>(Body);
            _task = _typed;
        }
        else
        {
            _task = Spindle.Run(() => { Body(); });
        }
    }

    public override SpindleTask Task => _task;

    public override SpindleTask<int> TypedTask => _hasValue ? _typed : base.TypedTask;

    public override bool HasValue => _hasValue;

    private int Body()
    {
        if (!_gate.Wait(TimeSpan.FromSeconds(TestUtil.DefaultTimeoutSeconds)))
        {
            throw new TimeoutException("The test never completed this run item.");
        }
        return _outcome switch
        {
            0 => _value,
            1 => throw _error!,
            _ => throw new OperationCanceledException(CancellationToken),
        };
    }

    private void Release(int outcome)
    {
        _outcome = outcome;
        _gate.Set();
    }

    public override void Succeed(int value)
    {
        _value = value;
        Release(0);
    }

    public override void Fault(Exception exception)
    {
        _error = exception;
        Release(1);
    }

    protected override void OnCancel(CancellationToken token) => Release(2);
}

/// <summary>PreservedSource over a Promise&lt;int&gt;: many awaiters, never stale, a new object per use.</summary>
public sealed class PreservedSourceContractTests : SourceContractTests
{
    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: true, CanFault: true, RereadBehavior.ReturnsSameOutcome, RenewalKind.None, MultipleAwaiters: true, CompletesOnWorker: false);

    protected override SourceOperation Start() => new Operation();

    [Fact]
    public override Task OnCompleted_FlowingOverload_RunsUnderTheRegistrantsExecutionContext()
        => base.OnCompleted_FlowingOverload_RunsUnderTheRegistrantsExecutionContext();

    private sealed class Operation : PromiseBackedOperation
    {
        public Operation()
            : base(static inner => inner.Task.Preserve())
        {
        }
    }
}

/// <summary>PreservedSource over a void async-method box: Preserve() consumes the pooled box for its awaiters.</summary>
public sealed class PreservedBoxContractTests : SourceContractTests
{
    protected override SourceCapabilities Capabilities { get; } = new(
        HasValue: false, CanFault: true, RereadBehavior.ReturnsSameOutcome, RenewalKind.None, MultipleAwaiters: true, CompletesOnWorker: false);

    protected override SourceOperation Start() => new Operation();

    [Fact]
    public override Task OnCompleted_FlowingOverload_RunsUnderTheRegistrantsExecutionContext()
        => base.OnCompleted_FlowingOverload_RunsUnderTheRegistrantsExecutionContext();

    private static async SpindleTask AwaitInBox(Promise inner) => await inner.Task;

    private sealed class Operation : SourceOperation
    {
        private readonly Promise _inner = new();
        private readonly SpindleTask _task;

        public Operation() => _task = AwaitInBox(_inner).Preserve();

        public override SpindleTask Task => _task;

        public override bool HasValue => false;

        public override void Succeed(int value) => _inner.SetResult();

        public override void Fault(Exception exception) => _inner.SetException(exception);

        protected override void OnCancel(CancellationToken token) => _inner.SetCanceled(token);
    }
}

/// <summary>An operation whose task is made from a Promise&lt;int&gt; that the test completes (through a box, Preserve(), ...).</summary>
internal abstract class PromiseBackedOperation : SourceOperation
{
    private readonly Promise<int> _inner = new();
    private readonly SpindleTask<int> _task;

    protected PromiseBackedOperation(Func<Promise<int>, SpindleTask<int>> makeTask) => _task = makeTask(_inner);

    public override SpindleTask Task => _task;

    public override SpindleTask<int> TypedTask => _task;

    public override bool HasValue => true;

    public override void Succeed(int value) => _inner.SetResult(value);

    public override void Fault(Exception exception) => _inner.SetException(exception);

    protected override void OnCancel(CancellationToken token) => _inner.SetCanceled(token);
}
