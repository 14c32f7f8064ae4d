using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;
using CsCheck;

namespace SpindleLib.Tests.Scopes;

/// <summary>
/// Random programs on one <see cref="TaskScope"/> (CsCheck, which shrinks a failure to a smallest program): children
/// started, children finishing or failing, the outer token cancelled, WaitAsync or DisposeAsync closing the scope, more
/// children started after that. Each child waits on its own gate and ends as the program says, or with the
/// OperationCanceledException of the scope's token when the scope is cancelled first, as a cooperative child does.
/// After every step the scope is checked against a model of its documented contract: the first child failure, the
/// outer token or disposal cancels the token; RunningChildren counts the children still running; a scope closed by
/// WaitAsync takes new children only while one still runs; WaitAsync completes when every child has, rethrowing the failure, or an AggregateException of all of
/// them when there are several, a child's cancellation by the scope not being one; disposal rethrows them unless an
/// awaited WaitAsync did; with no failure, a WaitAsync whose children finished after the outer token was cancelled is canceled.
/// </summary>
public class TaskScopeModelTests
{
    private enum OpKind
    {
        Start,
        Succeed,
        Fail,
        CancelOuter,
        Wait,
        Dispose,
    }

    private readonly record struct Op(OpKind Kind, int Child)
    {
        public override string ToString() => Kind is OpKind.Succeed or OpKind.Fail ? $"{Kind}(#{Child})" : Kind.ToString();
    }

    private static readonly Gen<Op[]> Programs = Gen.Frequency(
        (4, Gen.Const(new Op(OpKind.Start, 0))),
        (3, Gen.Int[0, 7].Select(static i => new Op(OpKind.Succeed, i))),
        (2, Gen.Int[0, 7].Select(static i => new Op(OpKind.Fail, i))),
        (1, Gen.Const(new Op(OpKind.CancelOuter, 0))),
        (1, Gen.Const(new Op(OpKind.Wait, 0))),
        (1, Gen.Const(new Op(OpKind.Dispose, 0)))).Array[1, 24];

    [Fact]
    public void RandomPrograms_MatchTheModel()
        => Programs.Sample(Run, iter: TestUtil.Stress(500), threads: 1, print: static p => string.Join(", ", p));

    /// <summary>A child: it waits for its gate, and its scope's cancellation cancels the gate.</summary>
    private sealed class Child
    {
        public readonly Promise Gate = new();
        public bool Ended; // set by the child itself as it ends

        public async SpindleTask Body(CancellationToken token)
        {
            try
            {
                using (token.Register(static g => ((Promise)g!).TrySetCanceled(), Gate))
                {
                    await Gate.Task;
                }
            }
            finally
            {
                Ended = true;
            }
        }
    }

    private static void Run(Op[] program)
    {
        using var outer = new CancellationTokenSource();
        var scope = new TaskScope(outer.Token);
        var children = new List<Child>();
        var failures = new List<Exception>();
        bool cancelled = false, closed = false, delivered = false, outerCancelled = false;
        bool? outerCancelledWhenIdle = null; // the outer token's state when the running count last came down to zero
        SpindleTask wait = default;
        bool waiting = false;

        void CancelModel() => cancelled = true; // every child still running then ends, cooperatively (checked below)

        for (int step = 0; step < program.Length; step++)
        {
            Op op = program[step];
            string at = $"step {step} ({op})";
            int endedBefore = children.Count(static c => c.Ended);
            switch (op.Kind)
            {
                case OpKind.Start:
                    var child = new Child();
                    if (closed && children.All(static c => c.Ended))
                    {
                        // WaitAsync closed it and every child has finished: the scope is over (while a child runs, the
                        // scope still takes more, and waits for them too)
                        Assert.Throws<InvalidOperationException>(() => scope.Run(child.Body));
                        break;
                    }
                    children.Add(child);
                    scope.Run(child.Body);
                    if (cancelled)
                    {
                        Assert.True(child.Ended, $"{at}: a child started in a cancelled scope did not end at once");
                    }
                    break;
                case OpKind.Succeed:
                case OpKind.Fail:
                    if (children.Count == 0 || children[op.Child % children.Count] is not { Ended: false } target)
                    {
                        break;
                    }
                    if (op.Kind == OpKind.Succeed)
                    {
                        target.Gate.SetResult();
                    }
                    else
                    {
                        var error = new InvalidOperationException($"child {op.Child % children.Count} failed at step {step}");
                        failures.Add(error);
                        target.Gate.SetException(error);
                        CancelModel(); // the first failure cancels the siblings
                    }
                    Assert.True(target.Ended, $"{at}: the child did not end");
                    break;
                case OpKind.CancelOuter:
                    outer.Cancel();
                    outerCancelled = true;
                    CancelModel();
                    break;
                case OpKind.Wait:
                    if (waiting || delivered)
                    {
                        break;
                    }
                    closed = true;
                    wait = scope.WaitAsync();
                    waiting = true;
                    break;
                case OpKind.Dispose:
                    closed = true;
                    CancelModel(); // disposing early cancels what is left
                    System.Threading.Tasks.ValueTask disposal = scope.DisposeAsync();
                    Assert.True(disposal.IsCompleted, $"{at}: disposal did not finish with every child ended");
                    if (failures.Count == 0 || delivered)
                    {
                        disposal.GetAwaiter().GetResult();
                    }
                    else
                    {
                        AssertFailures(failures, Record.Exception(() => disposal.GetAwaiter().GetResult()), at + ": disposal");
                    }
                    return; // the scope is over
            }

            if (cancelled)
            {
                Assert.True(children.All(static c => c.Ended), $"{at}: a child kept running in a cancelled scope");
            }
            int running = children.Count(static c => !c.Ended);
            if (running == 0 && children.Count(static c => c.Ended) > endedBefore)
            {
                outerCancelledWhenIdle = outerCancelled; // the last running child ended in this step
            }
            Assert.True(scope.RunningChildren == running, $"{at}: RunningChildren is {scope.RunningChildren}, the model says {running}");
            Assert.True(scope.Token.IsCancellationRequested == cancelled, $"{at}: the token is {(scope.Token.IsCancellationRequested ? "" : "not ")}cancelled, the model says the opposite");
            if (waiting)
            {
                Assert.True(wait.IsCompleted == (running == 0), $"{at}: WaitAsync is {(wait.IsCompleted ? "complete" : "pending")} with {running} children running");
                if (running == 0)
                {
                    Exception? thrown = Record.Exception(() => wait.GetAwaiter().GetResult());
                    if (failures.Count == 0 && (outerCancelledWhenIdle ?? outerCancelled))
                    {
                        // Cancelled from outside before the last child finished (or, with no child, before the scope
                        // completed), with no failure: canceled, with that token.
                        var oce = Assert.IsAssignableFrom<OperationCanceledException>(thrown);
                        Assert.True(oce.CancellationToken == outer.Token, $"{at}: WaitAsync's cancellation carries another token than the outer one");
                    }
                    else if (failures.Count == 0)
                    {
                        Assert.True(thrown is null, $"{at}: WaitAsync threw {thrown}");
                    }
                    else
                    {
                        AssertFailures(failures, thrown, at + ": WaitAsync");
                    }
                    waiting = false;
                    delivered = true;
                }
            }
        }

        // End every child still running and close the scope.
        foreach (Child c in children.Where(static c => !c.Ended).ToList())
        {
            c.Gate.SetResult();
        }
        System.Threading.Tasks.ValueTask end = scope.DisposeAsync();
        Assert.True(end.IsCompleted);
        if (failures.Count == 0 || delivered)
        {
            end.GetAwaiter().GetResult();
        }
        else
        {
            AssertFailures(failures, Record.Exception(() => end.GetAwaiter().GetResult()), "final disposal");
        }
    }

    private static void AssertFailures(List<Exception> failures, Exception? thrown, string at)
    {
        if (failures.Count == 1)
        {
            Assert.True(ReferenceEquals(failures[0], thrown), $"{at}: threw {thrown?.GetType().Name}: {thrown?.Message}, expected the one failure");
            return;
        }
        var aggregate = Assert.IsType<AggregateException>(thrown);
        Assert.True(failures.ToHashSet().SetEquals(aggregate.InnerExceptions) && aggregate.InnerExceptions.Count == failures.Count,
            $"{at}: threw [{string.Join("; ", aggregate.InnerExceptions.Select(static e => e.Message))}], expected [{string.Join("; ", failures.Select(static e => e.Message))}]");
    }
}
