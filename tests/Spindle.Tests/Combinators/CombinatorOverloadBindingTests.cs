using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;
using static SpindleLib.Tests.Combinators.CombinatorTestSupport;

namespace SpindleLib.Tests.Combinators;

/// <summary>
/// Every way of calling WhenAll and WhenAny that users write, compiled here so that a change to the overloads (a new
/// form, a rank) that breaks one fails the build. Each call is assigned to its expected type and its outcome checked,
/// which tells the tuple, array, index and span forms apart. <c>WhenAll(a, b, default)</c> over two tasks of one type
/// was ambiguous (CS0121: the tuple form's token against the span form's third task) until the tuple forms were ranked
/// above the span forms (<c>OverloadResolutionPriority</c>, from tools/Spindle.Generate); the calls marked "was CS0121"
/// did not compile before. The rank was checked against a list of 107 calls with the compiler's own binder: every call
/// that compiled before binds to the same overload, and the 7 ambiguous ones bind to the tuple forms.
/// </summary>
public sealed class CombinatorOverloadBindingTests
{
    private static SpindleTask<int> I(int value) => SpindleTask.FromResult(value);

    private static SpindleTask<string> S(string value) => SpindleTask.FromResult(value);

    private static SpindleTask U() => SpindleTask.CompletedTask;

    private static T Read<T>(SpindleTask<T> task) => task.GetAwaiter().GetResult();

    private static void Read(SpindleTask task) => task.GetAwaiter().GetResult();

    [Fact]
    public void TupleForms_OverOneType_WithADefaultLastArgument_TakeItAsTheToken()
    {
        // was CS0121
        SpindleTask<(int, int)> all = SpindleTask.WhenAll(I(1), I(2), default);
        Assert.Equal((1, 2), Read(all));
        // was CS0121: the options form, its options and token both default
        SpindleTask<(int, int)> allBoth = SpindleTask.WhenAll(I(1), I(2), default, default);
        Assert.Equal((1, 2), Read(allBoth));
        // was CS0121
        SpindleTask<(int, int, int)> all3 = SpindleTask.WhenAll(I(1), I(2), I(3), default);
        Assert.Equal((1, 2, 3), Read(all3));
        // was CS0121
        SpindleTask<(int, int, int, int, int, int, int, int)> all8 = SpindleTask.WhenAll(I(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), default);
        Assert.Equal((1, 2, 3, 4, 5, 6, 7, 8), Read(all8));
        // was CS0121
        SpindleTask<(int Index, int Result1, int Result2, int Result3)> any3 = SpindleTask.WhenAny(I(1), I(2), I(3), default);
        Assert.Equal(0, Read(any3).Index);
        // was CS0121
        SpindleTask<(int Index, int Result1, int Result2, int Result3, int Result4, int Result5, int Result6, int Result7, int Result8)> any8
            = SpindleTask.WhenAny(I(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), default);
        Assert.Equal(0, Read(any8).Index);
    }

    [Fact]
    public void TypedWhenAny_WithADefaultLastArgument_WaitsForItsTwoInputs_NotForADefaultThird()
    {
        // A third, default input (what the span form would have made of it) is complete: the race would end at once, index 2.
        var p1 = new Promise<int>();
        var p2 = new Promise<int>();
        SpindleTask<(int Index, int Result1, int Result2)> any = SpindleTask.WhenAny(Await(p1), Await(p2), default); // was CS0121
        Assert.False(any.IsCompleted);
        p2.TrySetResult(20);
        Assert.Equal((1, 0, 20), Read(any));
        p1.TrySetResult(10);
    }

    [Fact]
    public void TypedSpindleTasks_EveryForm_BindsAsBefore()
    {
        using var cts = new CancellationTokenSource();
        CancellationToken ct = cts.Token;
        var o = new WhenAllOptions { AggregateExceptions = true };
        int[] dest = new int[2];

        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2))));
        Assert.Equal((1, "s"), Read(SpindleTask.WhenAll(I(1), S("s"))));
        Assert.Equal((1, 2, 3), Read(SpindleTask.WhenAll(I(1), I(2), I(3))));
        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2), ct)));
        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2), default(CancellationToken))));
        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2), CancellationToken.None)));
        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2), cancellationToken: default)));
        Assert.Equal((1, "s"), Read(SpindleTask.WhenAll(I(1), S("s"), default)));
        Assert.Equal((1, "s"), Read(SpindleTask.WhenAll(I(1), S("s"), ct)));
        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2), o)));
        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2), o, ct)));
        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2), o, default)));
        Assert.Equal((1, 2), Read(SpindleTask.WhenAll(I(1), I(2), default, ct)));
        Assert.Equal((1, 2, 3), Read(SpindleTask.WhenAll(I(1), I(2), I(3), ct)));
        Assert.Equal((1, 2, 3, 4, 5, 6, 7, 8), Read(SpindleTask.WhenAll(I(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8))));
        Assert.Equal((1, 2, 3, 4, 5, 6, 7, 8), Read(SpindleTask.WhenAll(I(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), ct)));
        // Nine: no tuple form, the span form's array.
        SpindleTask<int[]> nine = SpindleTask.WhenAll(I(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), I(9));
        Assert.Equal(new[] { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, Read(nine));

        SpindleTask<int[]> array = SpindleTask.WhenAll([I(1), I(2)]);
        Assert.Equal(new[] { 1, 2 }, Read(array));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll([I(1), I(2)], ct)));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll([I(1), I(2)], default)));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll([I(1), I(2)], o)));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll([I(1), I(2)], o, ct)));
        SpindleTask into = SpindleTask.WhenAll([I(1), I(2)], dest);
        Read(into);
        Assert.Equal(new[] { 1, 2 }, dest);
        Read(SpindleTask.WhenAll([I(3), I(4)], dest, o));
        Assert.Equal(new[] { 3, 4 }, dest);
        Read(SpindleTask.WhenAll([I(5), I(6)], dest, o, ct));
        Assert.Equal(new[] { 5, 6 }, dest);
        Read(SpindleTask.WhenAll([I(7), I(8)], dest, cancellationToken: ct));
        Assert.Equal(new[] { 7, 8 }, dest);
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll(new[] { I(1), I(2) })));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll(new[] { I(1), I(2) }, ct)));
        Read(SpindleTask.WhenAll(new[] { I(9), I(10) }, dest));
        Assert.Equal(new[] { 9, 10 }, dest);
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll(new List<SpindleTask<int>> { I(1), I(2) })));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll((IEnumerable<SpindleTask<int>>)new[] { I(1), I(2) })));

        SpindleTask<(int Index, int Result1, int Result2)> any = SpindleTask.WhenAny(I(1), I(2));
        Assert.Equal((0, 1, 0), Read(any));
        SpindleTask<(int Index, int Result1, string Result2)> anyMixed = SpindleTask.WhenAny(I(1), S("s"));
        Assert.Equal((0, 1, null), Read(anyMixed));
        Assert.Equal((0, 1, 0, 0), Read(SpindleTask.WhenAny(I(1), I(2), I(3))));
        Assert.Equal((0, 1, 0), Read(SpindleTask.WhenAny(I(1), I(2), ct)));
        Assert.Equal((0, 1, null), Read(SpindleTask.WhenAny(I(1), S("s"), default)));
        Assert.Equal((0, 1, 0), Read(SpindleTask.WhenAny(I(1), I(2), cancellationToken: default)));
        SpindleTask<(int Index, int Result)> anyNine = SpindleTask.WhenAny(I(1), I(2), I(3), I(4), I(5), I(6), I(7), I(8), I(9));
        Assert.Equal((0, 1), Read(anyNine));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny([I(1), I(2)])));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny([I(1), I(2)], ct)));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny([I(1), I(2)], default)));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny(new[] { I(1), I(2) })));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny(new[] { I(1), I(2) }, ct)));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny(new List<SpindleTask<int>> { I(1), I(2) })));
        Func<CancellationToken, SpindleTask<int>>[] producers = [_ => I(1), _ => I(2)];
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny(producers)));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny(producers, ct)));
        // A Spindle task and a ValueTask of one type: both convert to ValueTask<int>, the span form of those.
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny(I(1), new ValueTask<int>(2))));
    }

    [Fact]
    public void UntypedAndBclInputs_EveryForm_BindsAsBefore()
    {
        using var cts = new CancellationTokenSource();
        CancellationToken ct = cts.Token;
        var o = new WhenAllOptions { AggregateExceptions = true };
        SpindleTask[] untyped = [U(), U()];

        Read(SpindleTask.WhenAll(U(), U()));
        Read(SpindleTask.WhenAll(U(), U(), U()));
        Read(SpindleTask.WhenAll([U(), U()]));
        Read(SpindleTask.WhenAll([U(), U()], ct));
        Read(SpindleTask.WhenAll([U(), U()], default));
        Read(SpindleTask.WhenAll([U(), U()], o));
        Read(SpindleTask.WhenAll([U(), U()], o, ct));
        Read(SpindleTask.WhenAll(untyped));
        Read(SpindleTask.WhenAll(untyped, ct));
        Read(SpindleTask.WhenAll(untyped, o));
        Read(SpindleTask.WhenAll((IEnumerable<SpindleTask>)untyped));
        Assert.Equal(0, Read(SpindleTask.WhenAny(U(), U())));
        Assert.Equal(0, Read(SpindleTask.WhenAny([U(), U()], ct)));
        Assert.Equal(0, Read(SpindleTask.WhenAny([U(), U()], default)));
        Assert.Equal(0, Read(SpindleTask.WhenAny(untyped)));
        Assert.Equal(0, Read(SpindleTask.WhenAny(untyped, ct)));
        Assert.Equal(0, Read(SpindleTask.WhenAny((IEnumerable<SpindleTask>)untyped)));
        Func<CancellationToken, SpindleTask>[] producers = [_ => U(), _ => U()];
        Assert.Equal(0, Read(SpindleTask.WhenAny(producers)));
        Assert.Equal(0, Read(SpindleTask.WhenAny(producers, ct)));

        Read(SpindleTask.WhenAll(Task.CompletedTask, Task.CompletedTask));
        Read(SpindleTask.WhenAll([Task.CompletedTask, Task.CompletedTask], ct));
        Read(SpindleTask.WhenAll([Task.CompletedTask, Task.CompletedTask], o));
        Read(SpindleTask.WhenAll(default(ValueTask), default(ValueTask)));
        Read(SpindleTask.WhenAll([default(ValueTask), default(ValueTask)], ct));
        Read(SpindleTask.WhenAll([default(ValueTask), default(ValueTask)], o, ct));
        Assert.Equal(0, Read(SpindleTask.WhenAny(Task.CompletedTask, Task.CompletedTask)));
        Assert.Equal(0, Read(SpindleTask.WhenAny([Task.CompletedTask, Task.CompletedTask], ct)));
        Assert.Equal(0, Read(SpindleTask.WhenAny(default(ValueTask), default(ValueTask))));
        Assert.Equal(0, Read(SpindleTask.WhenAny([default(ValueTask), default(ValueTask)], ct)));

        // Tasks of different types, or typed with untyped: the untyped span form.
        Read(SpindleTask.WhenAll(U(), I(1)));
        Read(SpindleTask.WhenAll(U(), I(1), S("s")));
        Assert.Equal(0, Read(SpindleTask.WhenAny(U(), I(1))));

        int[] dest = new int[2];
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll(Task.FromResult(1), Task.FromResult(2))));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll([Task.FromResult(1), Task.FromResult(2)], ct)));
        Read(SpindleTask.WhenAll([Task.FromResult(3), Task.FromResult(4)], dest));
        Assert.Equal(new[] { 3, 4 }, dest);
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll(new ValueTask<int>(1), new ValueTask<int>(2))));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll([new ValueTask<int>(1), new ValueTask<int>(2)], ct)));
        Assert.Equal(new[] { 1, 2 }, Read(SpindleTask.WhenAll([new ValueTask<int>(1), new ValueTask<int>(2)], o)));
        Read(SpindleTask.WhenAll([new ValueTask<int>(5), new ValueTask<int>(6)], dest, o));
        Assert.Equal(new[] { 5, 6 }, dest);
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny(Task.FromResult(1), Task.FromResult(2))));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny([Task.FromResult(1), Task.FromResult(2)], ct)));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny(new ValueTask<int>(1), new ValueTask<int>(2))));
        Assert.Equal((0, 1), Read(SpindleTask.WhenAny([new ValueTask<int>(1), new ValueTask<int>(2)], ct)));
    }

    [Fact]
    public void SpanForms_WithADefaultLastArgument_TakeItAsOneMoreInput_AsTheirDocsSay()
    {
        // Only the typed Spindle forms have a token after the tasks; for the others a default last argument is a third
        // input: a completed one for Spindle tasks and ValueTasks (a WhenAny then ends at once with index 2), a null Task
        // (refused, naming its index; with nullable references on, the compiler warns first, CS8604). Their docs say to pass a token with the span, `WhenAny([a, b], token)`.
        var p1 = new Promise();
        var p2 = new Promise();
        Assert.Equal(2, Read(SpindleTask.WhenAny(p1.Task, p2.Task, default)));
        var q1 = new Promise<int>();
        var q2 = new Promise<int>();
        Assert.Equal((2, 0), Read(SpindleTask.WhenAny(Await(q1).AsValueTask(), Await(q2).AsValueTask(), default)));
        Read(SpindleTask.WhenAll(U(), U(), default));
        Read(SpindleTask.WhenAll(default(ValueTask), default(ValueTask), default));
        Assert.Equal(new[] { 1, 2, 0 }, Read(SpindleTask.WhenAll(new ValueTask<int>(1), new ValueTask<int>(2), default)));
        var nullTask = Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(Task.CompletedTask, Task.CompletedTask, default!));
        Assert.Contains("index 2", nullTask.Message, StringComparison.Ordinal);
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAll(Task.FromResult(1), Task.FromResult(2), default!));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAny(Task.FromResult(1), Task.FromResult(2), default!));
        Assert.Throws<ArgumentException>(() => SpindleTask.WhenAll(Task.CompletedTask, Task.CompletedTask, default!));
        q1.TrySetResult(1);
        q2.TrySetResult(2);
        p1.TrySetResult();
        p2.TrySetResult();
    }
}
